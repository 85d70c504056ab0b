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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{Packed, collect_pairs, pairs};

    fn round_trip(strings: &[&str]) -> Vec<String> {
        Packed::new(strings.iter().copied())
            .iter()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn strings_come_back_in_order_across_every_length_boundary() {
        // LEB128 lengths: one byte up to 127, two up to 16,383, three beyond.
        let lengths = [0, 1, 127, 128, 16_383, 16_384, 70_000];
        let strings: Vec<String> = lengths.iter().map(|&n| "a".repeat(n)).collect();
        let refs: Vec<&str> = strings.iter().map(String::as_str).collect();
        assert_eq!(round_trip(&refs), strings);
    }

    #[test]
    fn a_string_costs_its_bytes_and_its_length_only() {
        assert_eq!(Packed::new(["", "ab"]).0.len(), 1 + 1 + 2);
        assert_eq!(Packed::new(["x".repeat(128).as_str()]).0.len(), 2 + 128);
        assert!(Packed::new(std::iter::empty()).iter().next().is_none());
    }

    #[test]
    fn non_ascii_strings_keep_their_bytes() {
        assert_eq!(
            round_trip(&["ünïcode", "värde", "日本"]),
            ["ünïcode", "värde", "日本"]
        );
    }

    #[test]
    fn cut_short_bytes_end_the_strings_rather_than_panic() {
        let whole = Packed::new(["abc", "defgh"]);
        let cut = Packed(whole.0[..whole.0.len() - 2].into());
        assert_eq!(cut.iter().collect::<Vec<_>>(), ["abc"]);
        // A length byte that promises more bytes than follow.
        assert!(Packed(Box::new([0x80])).iter().next().is_none());
    }

    #[test]
    fn pairs_go_in_as_keys_and_values_and_come_out_as_maps() {
        let map = BTreeMap::from([
            ("a".to_owned(), "1".to_owned()),
            ("b".to_owned(), String::new()),
        ]);
        let packed = Packed::new(pairs(Some(&map)).chain(["tail"]));
        let mut strings = packed.iter();
        assert_eq!(collect_pairs(&mut strings, 2), map);
        assert_eq!(strings.next(), Some("tail"));
        assert!(pairs(None).next().is_none());
        // Fewer strings than pairs asked for: what there is.
        let mut short = ["k"].into_iter();
        assert!(collect_pairs(&mut short, 3).is_empty());
    }
}
