//! Strings packed into one allocation ([`Packed`]), and the label and annotation pairs that
//! go in and come out.

/// Strings in one allocation, each as its byte length (LEB128) then its bytes: one
/// allocation a cached copy instead of one per label, annotation and field.
#[derive(PartialEq, Eq)]
pub(super) struct Packed(Box<[u8]>);

impl Packed {
    pub(super) fn new<'a>(strings: impl IntoIterator<Item = &'a str>) -> Self {
        let mut bytes = Vec::new();
        for string in strings {
            let mut len = string.len();
            loop {
                let low = (len & 0x7f) as u8;
                len >>= 7;
                if len == 0 {
                    bytes.push(low);
                    break;
                }
                bytes.push(low | 0x80);
            }
            bytes.extend_from_slice(string.as_bytes());
        }
        Self(bytes.into_boxed_slice())
    }

    /// The strings, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &str> {
        let mut rest: &[u8] = &self.0;
        std::iter::from_fn(move || {
            let mut len = 0usize;
            let mut shift = 0;
            loop {
                let (&byte, tail) = rest.split_first()?;
                rest = tail;
                len |= usize::from(byte & 0x7f) << shift;
                shift += 7;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            let (string, tail) = rest.split_at_checked(len)?;
            rest = tail;
            // Only `&str`s went in: the bytes are valid UTF-8.
            Some(std::str::from_utf8(string).unwrap_or_default())
        })
    }
}

pub(super) fn pairs(
    map: Option<&std::collections::BTreeMap<String, String>>,
) -> impl Iterator<Item = &str> {
    map.into_iter()
        .flatten()
        .flat_map(|(k, v)| [k.as_str(), v.as_str()])
}

pub(super) fn collect_pairs<'a>(
    strings: &mut impl Iterator<Item = &'a str>,
    count: usize,
) -> std::collections::BTreeMap<String, String> {
    let mut map = std::collections::BTreeMap::new();
    for _ in 0..count {
        let (Some(k), Some(v)) = (strings.next(), strings.next()) else {
            break;
        };
        map.insert(k.to_owned(), v.to_owned());
    }
    map
}
