//! apimachinery's string validators (`k8s.io/apimachinery/pkg/util/validation`): the one
//! DNS-name check of the workspace.

/// Longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest DNS-1035 label.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;

pub(super) const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
pub(super) const DNS1123_SUBDOMAIN_ERROR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
pub(super) const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
pub(super) const DNS1035_LABEL_ERROR_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";

/// `validation.IsDNS1123Subdomain`: the problems with `value`, empty when it is valid.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errors.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    // `label(\.label)*` with `label` = `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
    let matches = value.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                is_lower_alnum(*first)
                    && is_lower_alnum(*last)
                    && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
            }
            _ => false,
        }
    });
    if !matches {
        let format = format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*");
        errors.push(regex_error(
            DNS1123_SUBDOMAIN_ERROR_MSG,
            &format,
            &["example.com"],
        ));
    }
    errors
}

/// `validation.IsDNS1035Label`: the problems with `value`, empty when it is valid.
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errors.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    let bytes = value.as_bytes();
    let matches = match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_lowercase()
                && is_lower_alnum(*last)
                && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
        }
        _ => false,
    };
    if !matches {
        errors.push(regex_error(
            DNS1035_LABEL_ERROR_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errors
}

pub(super) fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

pub(super) fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `validation.RegexError`, including its odd `'a',  or 'b'` spacing.
pub(super) fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{message} (regex used for validation is '{format}')");
    }
    let mut out = format!("{message} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(format);
    out.push_str("')");
    out
}
