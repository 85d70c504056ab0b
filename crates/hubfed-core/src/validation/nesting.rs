//! How deeply a JSON document nests, read without building it (building it is what a
//! recursion limit stops: serde_json gives up at 128 levels, so an object nested deeper can be
//! stored in the hub — the API server allows 10,000 — but neither hubfed's webhook nor its
//! controller's Kubernetes client could read it). The webhook uses this to refuse such objects
//! with a message naming where they nest too deep, instead of failing to parse them.

/// The nesting of a document: its deepest level, where it first went deeper than the limit
/// asked about (object keys from the root; array items as `[]`), and the admission request's
/// `request.uid` if it has one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Nesting {
    pub depth: usize,
    pub too_deep_at: Option<Vec<String>>,
    pub request_uid: Option<String>,
}

/// Scans `json` (assumed well-formed; garbage gives a meaningless but bounded answer).
pub fn nesting(json: &[u8], limit: usize) -> Nesting {
    let mut scan = Scan {
        limit,
        ..Scan::default()
    };
    for &byte in json {
        if scan.in_string {
            scan.string_byte(byte);
        } else {
            scan.structural_byte(byte);
        }
    }
    scan.result
}

/// The state of a [`nesting`] scan.
#[derive(Default)]
struct Scan {
    limit: usize,
    result: Nesting,
    /// One entry per open container: the key under which the next value of it sits.
    keys: Vec<Option<String>>,
    /// The string being read.
    string: Vec<u8>,
    in_string: bool,
    escaped: bool,
    last_string: Option<String>,
    /// The string being read is `request.uid`'s value.
    capture_uid: bool,
    /// Server-side apply's bookkeeping mirrors the object's shape and comes first: where the
    /// object itself nests too deep is what to report, so a place inside `managedFields` only
    /// stands until the object's own is found. The depth of the `managedFields` container
    /// while inside it.
    in_managed_fields: Option<usize>,
    reported_in_managed_fields: bool,
}

impl Scan {
    /// A byte inside a string.
    fn string_byte(&mut self, byte: u8) {
        match (self.escaped, byte) {
            (true, _) => {
                self.escaped = false;
                self.string.push(byte);
            }
            (false, b'\\') => self.escaped = true,
            (false, b'"') => {
                self.in_string = false;
                let text = String::from_utf8_lossy(&self.string).into_owned();
                if self.capture_uid {
                    self.result.request_uid.get_or_insert(text.clone());
                    self.capture_uid = false;
                }
                self.last_string = Some(text);
                self.string.clear();
            }
            (false, _) => self.string.push(byte),
        }
    }

    /// A byte outside strings.
    fn structural_byte(&mut self, byte: u8) {
        match byte {
            b'"' => self.in_string = true,
            b':' => {
                let key = self.last_string.take();
                self.capture_uid = self.keys.len() == 2
                    && key.as_deref() == Some("uid")
                    && self.keys[0].as_deref() == Some("request");
                if let Some(slot) = self.keys.last_mut() {
                    *slot = key;
                }
            }
            b'{' | b'[' => self.open(byte == b'['),
            b'}' | b']' => {
                self.keys.pop();
                if self.in_managed_fields == Some(self.keys.len()) {
                    self.in_managed_fields = None;
                }
            }
            b',' => {
                self.last_string = None;
                self.capture_uid = false;
            }
            _ => {}
        }
    }

    /// An object or (`array`) an array opens: one level deeper.
    fn open(&mut self, array: bool) {
        if self.in_managed_fields.is_none()
            && self.keys.last().and_then(Option::as_deref) == Some("managedFields")
        {
            self.in_managed_fields = Some(self.keys.len());
        }
        self.keys.push(array.then(|| "[]".to_owned()));
        self.result.depth = self.result.depth.max(self.keys.len());
        let report = self.result.too_deep_at.is_none()
            || (self.reported_in_managed_fields && self.in_managed_fields.is_none());
        if self.keys.len() > self.limit && report {
            let path = self.keys[..self.keys.len() - 1]
                .iter()
                .flatten()
                .cloned()
                .collect();
            self.result.too_deep_at = Some(path);
            self.reported_in_managed_fields = self.in_managed_fields.is_some();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(levels: usize) -> String {
        let mut s = String::new();
        for _ in 0..levels {
            s.push_str(r#"{"n":"#);
        }
        s.push('1');
        s.push_str(&"}".repeat(levels));
        s
    }

    #[test]
    fn depth_path_and_uid_of_an_admission_review() {
        let review = format!(
            r#"{{"kind":"AdmissionReview","request":{{"uid":"abc-1","name":"x","object":{{"metadata":{{"uid":"not-this"}},"spec":{{"template":{}}}}}}}}}"#,
            deep(5)
        );
        let n = nesting(review.as_bytes(), 6);
        assert_eq!(n.depth, 9);
        assert_eq!(n.request_uid.as_deref(), Some("abc-1"));
        assert_eq!(
            n.too_deep_at,
            Some(
                ["request", "object", "spec", "template", "n", "n"]
                    .map(String::from)
                    .to_vec()
            )
        );
        assert_eq!(nesting(review.as_bytes(), 9).too_deep_at, None);
    }

    #[test]
    fn strings_with_brackets_quotes_and_escapes_do_not_count() {
        let text = r#"{"a":"{[\"}]","b":[{"c":"\\"}],"d":"x"}"#;
        let n = nesting(text.as_bytes(), 10);
        assert_eq!(n.depth, 3);
        assert_eq!(n.too_deep_at, None);
        let n = nesting(text.as_bytes(), 2);
        assert_eq!(n.too_deep_at, Some(vec!["b".to_owned(), "[]".to_owned()]));
    }

    #[test]
    fn very_deep_documents_are_measured_without_recursion() {
        let text = deep(100_000);
        let n = nesting(text.as_bytes(), 100);
        assert_eq!(n.depth, 100_000);
        assert_eq!(n.too_deep_at.map(|p| p.len()), Some(100));
    }

    #[test]
    fn the_object_itself_is_reported_rather_than_its_managed_fields() {
        let text = format!(
            r#"{{"metadata":{{"managedFields":[{{"fieldsV1":{}}}]}},"spec":{}}}"#,
            deep(10),
            deep(10)
        );
        let n = nesting(text.as_bytes(), 5);
        assert_eq!(
            n.too_deep_at,
            Some(["spec", "n", "n", "n", "n"].map(String::from).to_vec())
        );
    }
}
