//! Go's `base32.HexEncoding` of a SHA-256, for names that must match upstream's.

use sha2::{Digest as _, Sha256};

/// The first `len` characters of the lower-case base32hex (RFC 4648 §7) of the SHA-256 of
/// `input`, as `strings.ToLower(base32.HexEncoding.EncodeToString(sha256.Sum256(...)))`.
pub(super) fn short_hash(input: &str, len: usize) -> String {
    let digest = Sha256::digest(input.as_bytes());
    let mut encoded = data_encoding::BASE32HEX_NOPAD
        .encode(&digest)
        .to_ascii_lowercase();
    encoded.truncate(len);
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_hash_matches_gos_for_a_namespaced_name() {
        // Go: sha256.Sum256("default/hello") is a159efe0…, whose base32hex starts k5cuvo1ge4.
        assert_eq!(short_hash("default/hello", 10), "k5cuvo1ge4");
    }

    #[test]
    fn base32hex_matches_rfc_4648_test_vectors() {
        for (input, expected) in [
            ("f", "co"),
            ("fo", "cpng"),
            ("foo", "cpnmu"),
            ("foob", "cpnmuog"),
            ("fooba", "cpnmuoj1"),
            ("foobar", "cpnmuoj1e8"),
        ] {
            assert_eq!(
                data_encoding::BASE32HEX_NOPAD
                    .encode(input.as_bytes())
                    .to_ascii_lowercase(),
                expected,
                "{input:?}"
            );
        }
    }
}
