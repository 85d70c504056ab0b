//! Go duration strings (`metav1.Duration`), the wire form of every KubeFedConfig duration.

use std::time::Duration;

use crate::Error;

/// Parses a Go duration such as `"20s"`, `"1m0s"`, `"1.5h"` or `"300ms"` (Go's
/// `time.ParseDuration`). Negative durations are rejected: no KubeFed setting allows them.
pub fn parse_go_duration(value: &str) -> Result<Duration, Error> {
    let invalid = |reason: &'static str| Error::InvalidDuration {
        value: value.to_owned(),
        reason,
    };
    let mut rest = value.strip_prefix('+').unwrap_or(value);
    if rest.starts_with('-') {
        return Err(invalid("negative durations are not allowed"));
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid("empty duration"));
    }
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let integer_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (integer, after_integer) = rest.split_at(integer_len);
        let (fraction, after_number) = match after_integer.strip_prefix('.') {
            Some(after_dot) => {
                let len = after_dot
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after_dot.len());
                after_dot.split_at(len)
            }
            None => ("", after_integer),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number"));
        }
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(invalid("missing unit")),
            _ => return Err(invalid("unknown unit")),
        };
        let whole: u128 = if integer.is_empty() {
            0
        } else {
            integer
                .parse()
                .map_err(|_| invalid("number out of range"))?
        };
        total_nanos = whole
            .checked_mul(unit_nanos)
            .and_then(|nanos| nanos.checked_add(total_nanos))
            .ok_or_else(|| invalid("number out of range"))?;
        // Beyond 18 digits the fraction is below a nanosecond for every unit.
        let fraction = &fraction[..fraction.len().min(18)];
        if !fraction.is_empty() {
            let digits: u128 = fraction.parse().map_err(|_| invalid("bad fraction"))?;
            let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(18));
            total_nanos += digits * unit_nanos / scale;
        }
        rest = after_unit;
    }
    u64::try_from(total_nanos / 1_000_000_000)
        .map(|secs| {
            // The remainder of a division by 1e9 always fits in u32.
            let nanos = u32::try_from(total_nanos % 1_000_000_000).unwrap_or(0);
            Duration::new(secs, nanos)
        })
        .map_err(|_| invalid("number out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases = [
            ("20s", Duration::from_secs(20)),
            ("1m0s", Duration::from_secs(60)),
            ("5m", Duration::from_secs(300)),
            ("1h2m3s", Duration::from_secs(3723)),
            ("1.5h", Duration::from_secs(5400)),
            ("300ms", Duration::from_millis(300)),
            (".5s", Duration::from_millis(500)),
            ("2us", Duration::from_micros(2)),
            ("2µs", Duration::from_micros(2)),
            ("7ns", Duration::from_nanos(7)),
            ("0", Duration::ZERO),
            ("+3s", Duration::from_secs(3)),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_go_duration(input).unwrap(), expected, "{input}");
        }
    }

    #[test]
    fn rejects_invalid_durations() {
        for input in ["", "10", "s", "-1s", "1x", "1.s.", "1..5s", "abc"] {
            assert!(parse_go_duration(input).is_err(), "{input} should fail");
        }
    }
}
