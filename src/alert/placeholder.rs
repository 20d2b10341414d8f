//! Charting-platform placeholders that the sender left unresolved (`{{ticker}}`).
//!
//! A brace in a field the alert uses means the platform did not substitute a value;
//! trading on the literal text would be a guess, so the alert is refused and the
//! placeholder is named back to the sender.

/// Returns the placeholder text when `value` still holds braces: the first `{{…}}`
/// run when there is one, else the value itself (shortened).
pub fn find_placeholder(value: &str) -> Option<String> {
    // One pass over the (short) value rather than a search for each brace.
    if !value.bytes().any(|b| b == b'{' || b == b'}') {
        return None;
    }
    if let Some(start) = value.find("{{") {
        if let Some(len) = value[start..].find("}}") {
            return Some(super::snippet(&value[start..start + len + 2]));
        }
    }
    Some(super::snippet(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_placeholder() {
        assert_eq!(find_placeholder("{{ticker}}").as_deref(), Some("{{ticker}}"));
        assert_eq!(find_placeholder("NASDAQ:{{ticker}}").as_deref(), Some("{{ticker}}"));
        assert_eq!(find_placeholder("{ticker}").as_deref(), Some("{ticker}"));
        assert_eq!(find_placeholder("AAPL}").as_deref(), Some("AAPL}"));
        assert_eq!(find_placeholder("AAPL"), None);
    }
}
