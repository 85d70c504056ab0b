//! Go URL parsing (`net/url.Parse`, client-go `rest.DefaultServerURL`), enough to validate
//! endpoints and proxy URLs as KubeFed did.

use super::*;

#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct GoUrl {
    pub(super) scheme: String,
    pub(super) opaque: String,
    /// `host[:port]` as written, brackets kept for IPv6 literals.
    pub(super) host: String,
    /// Path after percent-decoding.
    pub(super) path: Vec<u8>,
}

impl GoUrl {
    /// `url.URL.Port()`: the digits after the last colon, if that colon starts a valid port.
    pub(super) fn port(&self) -> &str {
        match self.host.rfind(':') {
            Some(colon) if valid_optional_port(&self.host[colon..]) => &self.host[colon + 1..],
            _ => "",
        }
    }
}

/// `url.Parse`, with Go's error text (`parse "<url>": <reason>`).
pub(super) fn go_url_parse(raw: &str) -> Result<GoUrl, String> {
    let (without_fragment, fragment) = match raw.split_once('#') {
        Some((url, fragment)) => (url, fragment),
        None => (raw, ""),
    };
    let url = go_url_parse_without_fragment(without_fragment)
        .map_err(|reason| format!("parse {}: {reason}", go_quote(without_fragment)))?;
    percent_decode(fragment, EscapeMode::Other)
        .map_err(|reason| format!("parse {}: {reason}", go_quote(raw)))?;
    Ok(url)
}

pub(super) fn go_url_parse_without_fragment(raw: &str) -> Result<GoUrl, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    if raw == "*" {
        return Ok(GoUrl {
            path: b"*".to_vec(),
            ..GoUrl::default()
        });
    }
    let (scheme, rest) = go_url_scheme(raw)?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = if rest.ends_with('?') && rest.matches('?').count() == 1 {
        &rest[..rest.len() - 1]
    } else {
        rest.split_once('?').map_or(rest, |(before, _)| before)
    };
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            return Ok(GoUrl {
                scheme,
                opaque: rest.to_owned(),
                ..GoUrl::default()
            });
        }
        let first_segment = rest.split('/').next().unwrap_or_default();
        if first_segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    let mut host = String::new();
    let mut path = rest;
    if (!scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let after_slashes = &rest[2..];
        let (authority, after_authority) = match after_slashes.find('/') {
            Some(slash) => after_slashes.split_at(slash),
            None => (after_slashes, ""),
        };
        host = go_url_authority(authority)?;
        path = after_authority;
    }
    let path = percent_decode(path, EscapeMode::Other)?;
    Ok(GoUrl {
        scheme,
        opaque: String::new(),
        host,
        path,
    })
}

/// `getScheme`: letters then `:`; digits, `+`, `-`, `.` allowed after the first character.
pub(super) fn go_url_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, b) in raw.bytes().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_owned()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// `parseAuthority`: optional `userinfo@`, then the host.
pub(super) fn go_url_authority(authority: &str) -> Result<String, String> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    go_url_host(host)?;
    if let Some(userinfo) = userinfo {
        let valid = userinfo
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b) || b >= 0x80);
        if !valid {
            return Err("net/url: invalid userinfo".to_owned());
        }
        percent_decode(userinfo, EscapeMode::Other)?;
    }
    Ok(host.to_owned())
}

/// `parseHost`: a valid optional port after the host or the IPv6 literal, legal characters.
pub(super) fn go_url_host(host: &str) -> Result<(), String> {
    let colon_port = if host.starts_with('[') {
        let Some(close) = host.rfind(']') else {
            return Err("missing ']' in host".to_owned());
        };
        Some(&host[close + 1..])
    } else {
        host.rfind(':').map(|colon| &host[colon..])
    };
    if let Some(colon_port) = colon_port
        && !valid_optional_port(colon_port)
    {
        return Err(format!("invalid port {} after host", go_quote(colon_port)));
    }
    percent_decode(host, EscapeMode::Host).map(|_| ())
}

pub(super) fn valid_optional_port(colon_port: &str) -> bool {
    colon_port.is_empty()
        || colon_port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum EscapeMode {
    Host,
    Other,
}

/// Go's `unescape`: `%XX` must be two hex digits; in hosts only non-ASCII bytes (or `%25`)
/// may be escaped and ASCII characters outside the host alphabet are errors.
pub(super) fn percent_decode(s: &str, mode: EscapeMode) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| bytes.get(j).and_then(|h| char::from(*h).to_digit(16));
            let (Some(high), Some(low)) = (hex(i + 1), hex(i + 2)) else {
                let end = (i + 3).min(bytes.len());
                return Err(format!(
                    "invalid URL escape {}",
                    go_quote(&String::from_utf8_lossy(&bytes[i..end]))
                ));
            };
            let escape = &s[i..i + 3];
            if mode == EscapeMode::Host && high < 8 && escape != "%25" {
                return Err(format!("invalid URL escape {}", go_quote(escape)));
            }
            // Both digits are below 16, so the byte fits.
            out.push(u8::try_from(high * 16 + low).unwrap_or_default());
            i += 3;
            continue;
        }
        if mode == EscapeMode::Host && b < 0x80 && !is_host_byte(b) {
            return Err(format!(
                "invalid character {} in host name",
                go_quote(&char::from(b).to_string())
            ));
        }
        out.push(b);
        i += 1;
    }
    Ok(out)
}

/// ASCII bytes `shouldEscape(b, encodeHost)` leaves alone.
pub(super) fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&b)
}

/// client-go `rest.DefaultServerURL(host, "", _, true)`: a URL with scheme and host is taken
/// as it is, any path in it a prefix of every request (an API server behind a path-routing
/// proxy, e.g. `https://my.example.com:80/path/to/endpoint`); anything else is parsed again as
/// `https://` + the value, which may then carry no path beyond `/` (`example.com/path` is
/// refused).
pub(super) fn default_server_url(host: &str) -> Result<GoUrl, String> {
    if let Ok(url) = go_url_parse(host)
        && !url.scheme.is_empty()
        && !url.host.is_empty()
    {
        return Ok(url);
    }
    let url = go_url_parse(&format!("https://{host}"))?;
    if !url.path.is_empty() && url.path != b"/" {
        return Err(format!(
            "host must be a URL or a host:port pair: {}",
            go_quote(host)
        ));
    }
    Ok(url)
}

/// `text` with every password that `value` carries in a `scheme://user:password@host`
/// authority (also once client-go prefixed `https://`) replaced by `xxxxx`, as Go's
/// `URL.Redacted` does, so that an echoed value or parse error leaks no credential.
pub(super) fn redact_passwords(text: &str, value: &str) -> String {
    let mut redacted = text.to_owned();
    for candidate in [value.to_owned(), format!("https://{value}")] {
        for (scheme_end, _) in candidate.match_indices("://") {
            let authority = &candidate[scheme_end + 3..];
            let authority = authority
                .find(['/', '?', '#'])
                .map_or(authority, |end| &authority[..end]);
            let password = authority
                .rfind('@')
                .and_then(|at| authority[..at].split_once(':'))
                .map(|(_, password)| password);
            if let Some(password) = password.filter(|p| !p.is_empty()) {
                redacted = redacted.replace(password, "xxxxx");
            }
        }
    }
    redacted
}
