//! JSON patch with the semantics of Go's `github.com/evanphx/json-patch` v4 (v4.12.0), the
//! library KubeFed applies overrides with (docs/kubefed-compatibility.md §1.6 "Overrides").
//!
//! It is lenient where RFC 6902 is strict, and KubeFed users' manifests rely on that, so hubfed
//! follows it rule for rule (each checked against the real library by the differential test
//! over `testdata/overrides/golden.json`, produced by `hack/overrides-golden`):
//!
//! - `replace` of a missing member of an existing object adds it; only the parent must exist;
//! - a path is split at `/` and everything before the first `/` is ignored: `spec/replicas`
//!   means `/replicas`; a path without `/` never applies (except `replace` of `""`);
//! - `~1` and `~0` are unescaped, any other `~` is kept as it is;
//! - array indices are parsed like Go's `strconv.Atoi` (`01` and `+1` are index 1) and may be
//!   negative, counting from the end; `-` appends for `add` only;
//! - a member holding `null`, a string, a number or a boolean cannot be stepped through;
//! - `replace` of `""` replaces the whole document with an object or array value, and does
//!   nothing at all with a scalar value (a Go quirk: the error it builds wraps `nil`);
//! - a missing value (KubeFed omits `null`) is `null`.
//!
//! The one behaviour not copied is a crash: `replace` of `""` without a value dereferences a nil
//! pointer in Go (KubeFed's sync controller panics); here it is an error.

use std::fmt;

use serde_json::Value;

/// The operations KubeFed's overrides may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Remove,
    Replace,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Add => "add",
            Op::Remove => "remove",
            Op::Replace => "replace",
        })
    }
}

/// One operation: `value` is `None` when absent (or `null`, which KubeFed omits).
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    pub op: Op,
    pub path: String,
    pub value: Option<Value>,
}

/// Why an operation did not apply; the texts follow the Go library's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("{op} operation does not apply: doc is missing path: {path:?}")]
    MissingPath { op: Op, path: String },
    #[error("replace operation does not apply: doc is missing key: {path}")]
    MissingKey { path: String },
    #[error("error in remove for path: '{path}': Unable to remove nonexistent key: {key}")]
    NonexistentKey { path: String, key: String },
    #[error("error in {op} for path: '{path}': value was not a proper array index: '{key}'")]
    NotAnIndex { op: Op, path: String, key: String },
    #[error("error in {op} for path: '{path}': Unable to access invalid index: {key}")]
    InvalidIndex { op: Op, path: String, key: String },
    #[error("replace operation on the whole object needs a value")]
    MissingRootValue,
    /// Not the library's: apimachinery's `Unstructured` refuses an object without `kind`.
    #[error("the result has no kind (Object 'Kind' is missing)")]
    KindMissing,
}

/// Applies `operations` in order. On error `doc` may be partly changed: callers that need
/// atomicity apply to a copy (as [`crate::overrides`] does).
pub fn apply(doc: &mut Value, operations: &[Operation]) -> Result<(), PatchError> {
    operations.iter().try_for_each(|op| apply_one(doc, op))
}

fn apply_one(doc: &mut Value, operation: &Operation) -> Result<(), PatchError> {
    let Operation { op, path, value } = operation;
    let value = || value.clone().unwrap_or(Value::Null);
    if *op == Op::Replace && path.is_empty() {
        match operation.value.as_ref() {
            None => return Err(PatchError::MissingRootValue),
            Some(v @ (Value::Object(_) | Value::Array(_))) => *doc = v.clone(),
            Some(_) => {}
        }
        return Ok(());
    }
    let missing_path = || PatchError::MissingPath {
        op: *op,
        path: path.clone(),
    };
    let (container, key) = find_container(doc, path).ok_or_else(missing_path)?;
    let index_error = |error: IndexError| match error {
        IndexError::NotAnIndex => PatchError::NotAnIndex {
            op: *op,
            path: path.clone(),
            key: key.clone(),
        },
        IndexError::OutOfRange => PatchError::InvalidIndex {
            op: *op,
            path: path.clone(),
            key: key.clone(),
        },
    };
    match (op, container) {
        (Op::Add | Op::Replace, Value::Object(map)) => {
            map.insert(key, value());
        }
        (Op::Remove, Value::Object(map)) => {
            if map.remove(&key).is_none() {
                return Err(PatchError::NonexistentKey {
                    path: path.clone(),
                    key,
                });
            }
        }
        (Op::Add, Value::Array(items)) if key == "-" => items.push(value()),
        (Op::Add, Value::Array(items)) => {
            let at = array_index(&key, items.len() + 1).map_err(index_error)?;
            items.insert(at, value());
        }
        (Op::Replace, Value::Array(items)) => {
            let at = array_index(&key, items.len())
                .map_err(|_| PatchError::MissingKey { path: path.clone() })?;
            items[at] = value();
        }
        (Op::Remove, Value::Array(items)) => {
            let at = array_index(&key, items.len()).map_err(index_error)?;
            items.remove(at);
        }
        // `find_container` returns objects and arrays only.
        (_, _) => return Err(missing_path()),
    }
    Ok(())
}

/// Go's `findObject`: the container the last segment of `path` names a member of, and that
/// member's (unescaped) key. `None` when a segment on the way is missing or not a container.
fn find_container<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let segments: Vec<&str> = path.split('/').collect();
    let (last, parents) = segments.split_last()?;
    let parents = parents.get(1..)?;
    let mut current = doc;
    for segment in parents {
        let key = unescape(segment);
        let next = match current {
            Value::Object(map) => map.get_mut(&key)?,
            Value::Array(items) => {
                let at = array_index(&key, items.len()).ok()?;
                &mut items[at]
            }
            _ => return None,
        };
        if !matches!(next, Value::Object(_) | Value::Array(_)) {
            return None;
        }
        current = next;
    }
    Some((current, unescape(last)))
}

enum IndexError {
    NotAnIndex,
    OutOfRange,
}

/// An index into an array of `len` elements as Go reads it: `strconv.Atoi`, negative indices
/// counting from the end.
fn array_index(key: &str, len: usize) -> Result<usize, IndexError> {
    let index = go_atoi(key).ok_or(IndexError::NotAnIndex)?;
    let len = i128::try_from(len).map_err(|_| IndexError::OutOfRange)?;
    let index = if index < 0 { index + len } else { index };
    if (0..len).contains(&index) {
        usize::try_from(index).map_err(|_| IndexError::OutOfRange)
    } else {
        Err(IndexError::OutOfRange)
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: an optional sign and decimal digits, within `int64`.
fn go_atoi(text: &str) -> Option<i128> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Leading zeros do not count (Go's ParseInt reads `0000…01` as 1).
    let trimmed = digits.trim_start_matches('0');
    let digits = if trimmed.is_empty() { "0" } else { trimmed };
    if digits.len() > 19 {
        return None;
    }
    let magnitude: i128 = digits.parse().ok()?;
    let value = if text.starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    (i128::from(i64::MIN)..=i128::from(i64::MAX))
        .contains(&value)
        .then_some(value)
}

/// RFC 6901 unescaping as Go's `strings.NewReplacer("~1", "/", "~0", "~")` does it: left to
/// right, anything else kept as it is.
fn unescape(segment: &str) -> String {
    if !segment.contains('~') {
        return segment.to_owned();
    }
    let mut out = String::with_capacity(segment.len());
    let mut rest = segment;
    while let Some(at) = rest.find('~') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if let Some(tail) = rest.strip_prefix("~1") {
            out.push('/');
            rest = tail;
        } else if let Some(tail) = rest.strip_prefix("~0") {
            out.push('~');
            rest = tail;
        } else {
            out.push('~');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn op(op: Op, path: &str, value: Option<Value>) -> Operation {
        Operation {
            op,
            path: path.to_owned(),
            value,
        }
    }

    #[test]
    fn atoi_follows_go() {
        for (text, want) in [
            ("0", Some(0)),
            ("01", Some(1)),
            ("+1", Some(1)),
            ("-1", Some(-1)),
            ("-0", Some(0)),
            ("9223372036854775807", Some(i128::from(i64::MAX))),
            ("-9223372036854775808", Some(i128::from(i64::MIN))),
            ("9223372036854775808", None),
            ("99999999999999999999", None),
            ("000000000000000000000001", Some(1)),
            ("", None),
            ("-", None),
            ("+-1", None),
            ("1_0", None),
            (" 1", None),
            ("0x1", None),
        ] {
            assert_eq!(go_atoi(text), want, "{text:?}");
        }
    }

    #[test]
    fn unescape_left_to_right() {
        assert_eq!(unescape("a~1b"), "a/b");
        assert_eq!(unescape("a~0b"), "a~b");
        assert_eq!(unescape("~01"), "~1");
        assert_eq!(unescape("~2"), "~2");
        assert_eq!(unescape("a~"), "a~");
        assert_eq!(unescape("~~1"), "~/");
    }

    #[test]
    fn replace_of_the_root_with_a_scalar_changes_nothing() {
        let mut doc = json!({"kind": "X"});
        apply(&mut doc, &[op(Op::Replace, "", Some(json!(5)))]).unwrap();
        assert_eq!(doc, json!({"kind": "X"}));
        assert_eq!(
            apply(&mut doc, &[op(Op::Replace, "", None)]),
            Err(PatchError::MissingRootValue)
        );
    }

    #[test]
    fn negative_indices_count_from_the_end() {
        let mut doc = json!({"a": [1, 2, 3]});
        apply(&mut doc, &[op(Op::Add, "/a/-1", Some(json!(9)))]).unwrap();
        assert_eq!(doc, json!({"a": [1, 2, 3, 9]}));
        apply(&mut doc, &[op(Op::Remove, "/a/-4", None)]).unwrap();
        assert_eq!(doc, json!({"a": [2, 3, 9]}));
        assert!(matches!(
            apply(&mut doc, &[op(Op::Remove, "/a/-4", None)]),
            Err(PatchError::InvalidIndex { .. })
        ));
    }
}
