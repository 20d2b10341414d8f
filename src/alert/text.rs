//! Plain-text alerts (pest grammar in `grammar/alert.pest`). Placeholder until the grammar lands.

use super::{Alerts, ParseError};

/// Parses a plain-text alert.
pub fn parse(text: &str) -> Result<Alerts, ParseError> {
    let _ = text;
    Err(ParseError::NotAnAlert("plain-text alerts are not supported yet".into()))
}
