//! Go formatting helpers: quoting and durations as Go prints them, JSON type names.

use super::*;

/// Go's `strconv.Quote` (`%q`) for valid UTF-8.
pub(super) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() => {
                let code = u32::from(c);
                if code < 0x80 {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code <= 0xffff {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `time.Duration.String()` for a signed nanosecond count (`1m0s`, `1.5s`, `300ms`).
pub(super) fn go_duration_string(nanos: i128) -> String {
    fn fraction(value: u128, precision: usize) -> String {
        if value == 0 {
            return String::new();
        }
        let digits = format!("{value:0precision$}");
        format!(".{}", digits.trim_end_matches('0'))
    }
    let magnitude = nanos.unsigned_abs();
    if magnitude == 0 {
        return "0s".to_owned();
    }
    let body = if magnitude < 1_000_000_000 {
        let (scale, precision, unit) = if magnitude < 1_000 {
            (1, 0, "ns")
        } else if magnitude < 1_000_000 {
            (1_000, 3, "\u{b5}s")
        } else {
            (1_000_000, 6, "ms")
        };
        format!(
            "{}{}{unit}",
            magnitude / scale,
            fraction(magnitude % scale, precision)
        )
    } else {
        let seconds_total = magnitude / 1_000_000_000;
        let seconds = format!(
            "{}{}s",
            seconds_total % 60,
            fraction(magnitude % 1_000_000_000, 9)
        );
        let minutes_total = seconds_total / 60;
        let hours = minutes_total / 60;
        match (hours, minutes_total) {
            (_, 0) => seconds,
            (0, minutes) => format!("{minutes}m{seconds}"),
            (hours, minutes) => format!("{hours}h{}m{seconds}", minutes % 60),
        }
    };
    if nanos < 0 { format!("-{body}") } else { body }
}

/// The JSON type of a value, as Kubernetes names it in messages (`"object"`, `"string"`, ...).
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Treats JSON `null` like an absent member: the API server prunes nulls of non-nullable
/// fields before admission, and Go decodes both to the zero value.
pub(super) fn present(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}
