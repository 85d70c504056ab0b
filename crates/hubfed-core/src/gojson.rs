//! A byte-exact reimplementation of Go's `encoding/json` `Encoder.Encode` for JSON values, as
//! KubeFed used it (through apimachinery's `Unstructured.MarshalJSON`) to hash templates and
//! overrides. Hashes written by KubeFed and by hubfed must agree, so every detail matters:
//!
//! - compact output, object keys sorted byte-wise, a trailing `"\n"`;
//! - HTML escaping: `<`, `>`, `&` become `\u003c`, `\u003e`, `\u0026`; U+2028/U+2029 become
//!   `\u2028`/`\u2029`;
//! - control characters become `\u00XX` (lowercase hex) except `\n`, `\r`, `\t`. KubeFed v0.10
//!   was built with Go < 1.22, which also wrote `\b` and `\f` as `\u0008` and `\u000c` (newer Go
//!   writes `\b`/`\f`); we follow the Go KubeFed was built with;
//! - numbers: apimachinery decodes a JSON number to `int64` when it fits, else to `float64`;
//!   integers print as integers, floats in Go's format (shortest round-trip digits; exponent
//!   form `1e+21` / `1.5e-7` when `|x| < 1e-6` or `|x| >= 1e21`, plain decimal otherwise).

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// Go `json.NewEncoder(w).Encode(v)` of `v` as decoded by apimachinery (integers that fit in
/// `int64` stay integers, every other number is a `float64`). Includes the trailing newline.
pub fn go_json_encode(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, NumberMode::Unstructured);
    out.push('\n');
    out
}

/// How numbers are typed on the Go side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumberMode {
    /// apimachinery's unstructured decoding: `int64` when the literal fits, else `float64`.
    Unstructured,
    /// Plain `encoding/json` into `interface{}`: always `float64`.
    Float64,
}

pub(crate) fn write_value(out: &mut String, value: &Value, numbers: NumberMode) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n, numbers),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, numbers);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted explicitly: serde_json keeps insertion order when a dependency enables
            // its `preserve_order` feature.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item, numbers);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &Number, numbers: NumberMode) {
    // A u64 above i64::MAX does not fit apimachinery's int64 and becomes a float64.
    if numbers == NumberMode::Unstructured
        && let Some(i) = n.as_i64()
    {
        let _ = write!(out, "{i}");
        return;
    }
    match n.as_f64() {
        Some(f) => write_go_float(out, f),
        // Only reachable with serde_json's arbitrary_precision feature.
        None => {
            let _ = write!(out, "{n}");
        }
    }
}

/// Go `encoding/json`'s `floatEncoder` for 64-bit floats.
pub(crate) fn write_go_float(out: &mut String, f: f64) {
    if !f.is_finite() {
        // Go refuses to encode these; JSON input cannot contain them anyway.
        out.push_str("null");
        return;
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` prints the same shortest round-trip digits as strconv's 'e' format with
        // precision -1, but writes the exponent bare ("1e21", "1.5e-7"). Go writes "e+21", and
        // turns its two-digit "e-07" into "e-7", which is what Rust already prints.
        let formatted = format!("{f:e}");
        match formatted.split_once('e') {
            Some((mantissa, exponent)) => {
                out.push_str(mantissa);
                out.push('e');
                if !exponent.starts_with('-') {
                    out.push('+');
                }
                out.push_str(exponent);
            }
            None => out.push_str(&formatted),
        }
    } else {
        // Display prints the shortest round-trip digits in plain decimal, like strconv 'f', -1.
        let _ = write!(out, "{f}");
    }
}

pub(crate) fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 || c == '<' || c == '>' || c == '&' => {
                let b = c as u32 as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn float(f: f64) -> String {
        let mut out = String::new();
        write_go_float(&mut out, f);
        out
    }

    #[test]
    fn empty_object_has_trailing_newline() {
        assert_eq!(go_json_encode(&json!({})), "{}\n");
        assert_eq!(go_json_encode(&Value::Null), "null\n");
    }

    #[test]
    fn keys_are_sorted_bytewise_at_every_level() {
        let v = json!({"b": {"z": 1, "a": 2}, "a": [{"y": true, "B": false}], "A": null});
        assert_eq!(
            go_json_encode(&v),
            "{\"A\":null,\"a\":[{\"B\":false,\"y\":true}],\"b\":{\"a\":2,\"z\":1}}\n"
        );
    }

    /// Expected text produced by Go 1.26 `encoding/json` (throwaway program, see
    /// `version::tests` for provenance) from the same input.
    #[test]
    fn escapes_like_go() {
        let v = json!({
            "text": "line\nbreak\ttab\r\"quote\" back\\slash \u{1} \u{1f} \u{7f} \u{2028} \u{2029} é 日本",
            "tier": "<front&end>",
        });
        assert_eq!(
            go_json_encode(&v),
            "{\"text\":\"line\\nbreak\\ttab\\r\\\"quote\\\" back\\\\slash \\u0001 \\u001f \u{7f} \\u2028 \\u2029 é 日本\",\"tier\":\"\\u003cfront\\u0026end\\u003e\"}\n"
        );
    }

    #[test]
    fn backspace_and_form_feed_escape_like_go_before_1_22() {
        assert_eq!(
            go_json_encode(&json!({"s": "\u{8}\u{c}"})),
            "{\"s\":\"\\u0008\\u000c\"}\n"
        );
    }

    #[test]
    fn keys_are_escaped_too() {
        assert_eq!(go_json_encode(&json!({"a<b": 1})), "{\"a\\u003cb\":1}\n");
    }

    #[test]
    fn floats_use_go_formatting() {
        assert_eq!(float(0.5), "0.5");
        assert_eq!(float(100.0), "100");
        assert_eq!(float(1e20), "100000000000000000000");
        assert_eq!(float(1e21), "1e+21");
        assert_eq!(float(1e100), "1e+100");
        assert_eq!(float(1.7976931348623157e308), "1.7976931348623157e+308");
        assert_eq!(float(1e-6), "0.000001");
        assert_eq!(float(0.000001234), "0.000001234");
        assert_eq!(float(1e-7), "1e-7");
        assert_eq!(float(-1e-7), "-1e-7");
        assert_eq!(float(1.5e-7), "1.5e-7");
        assert_eq!(float(2.5e-10), "2.5e-10");
        assert_eq!(float(5e-324), "5e-324");
        assert_eq!(float(0.1), "0.1");
        assert_eq!(float(123456789.125), "123456789.125");
        assert_eq!(float(-0.0), "-0");
        assert_eq!(float(0.0), "0");
        assert_eq!(float(123456789012345680000.0), "123456789012345680000");
    }

    /// The whole number table, compared with Go's output for the same JSON text.
    #[test]
    fn numbers_follow_apimachinery_typing() {
        let v: Value = serde_json::from_str(crate::test_support::GO_NUMBER_TABLE).unwrap();
        assert_eq!(
            go_json_encode(&v),
            "{\"a\":100000000000000000000,\"b\":0.000001,\"c\":1e-7,\"d\":123456789.125,\"e\":5e-324,\"f\":1.7976931348623157e+308,\"g\":0.1,\"h\":-0,\"i\":1e+100,\"j\":12345678901234567000,\"k\":9223372036854775807,\"l\":-9223372036854775808,\"m\":2.5e-10,\"n\":0.000001234,\"o\":1,\"p\":1000,\"q\":123456789012345680000,\"r\":-1e-7}\n"
        );
    }

    #[test]
    fn float64_mode_turns_integers_into_floats() {
        let mut out = String::new();
        write_value(
            &mut out,
            &json!([5, 9007199254740993_u64, 1e21]),
            NumberMode::Float64,
        );
        assert_eq!(out, "[5,9007199254740992,1e+21]");
    }
}
