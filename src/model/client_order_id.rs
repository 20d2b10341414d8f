//! The client order id: the idempotency key a broker gets with an order.
//!
//! Kept inline (no heap): every request of every delivery carries one, twice counting the
//! neutral order's, and the ones this library makes are 32 characters
//! ([`crate::builder::client_order_id`]).

use serde::de::{Deserializer, Error as _};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::ops::Deref;

/// A client order id: up to [`ClientOrderId::MAX_LEN`] ASCII characters with no space or
/// control character, the alphabet every supported broker's field takes. Validated on
/// construction, so a value in hand is always sendable. Empty (the default) means the
/// order carries none.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientOrderId {
    len: u8,
    bytes: [u8; ClientOrderId::MAX_LEN],
}

/// Why a text cannot be a client order id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientOrderIdError {
    /// Longer than [`ClientOrderId::MAX_LEN`].
    #[error("a client order id has at most 48 characters; this one has {0}")]
    TooLong(usize),
    /// A space, a control character or a character outside ASCII.
    #[error("a client order id takes printable ASCII characters without spaces only")]
    BadCharacter,
}

impl ClientOrderId {
    /// No id: the order carries none.
    pub const NONE: ClientOrderId = ClientOrderId { len: 0, bytes: [0; ClientOrderId::MAX_LEN] };

    /// The longest id held: room to spare over the 32 characters of the ids made here.
    pub const MAX_LEN: usize = 48;

    /// The id, if `s` can be one.
    pub fn new(s: &str) -> Result<ClientOrderId, ClientOrderIdError> {
        let b = s.as_bytes();
        if b.len() > Self::MAX_LEN {
            return Err(ClientOrderIdError::TooLong(s.chars().count()));
        }
        if !b.iter().all(|c| c.is_ascii_graphic()) {
            return Err(ClientOrderIdError::BadCharacter);
        }
        let mut bytes = [0u8; Self::MAX_LEN];
        bytes[..b.len()].copy_from_slice(b);
        // The length fits: at most MAX_LEN (48).
        Ok(ClientOrderId { len: b.len() as u8, bytes })
    }

    /// `swh-` and the first 14 bytes of `digest` in lowercase hexadecimal: the ids the
    /// builder makes, printable ASCII by construction.
    pub(crate) fn swh(digest: &[u8; 32]) -> ClientOrderId {
        let mut bytes = [0u8; Self::MAX_LEN];
        bytes[..4].copy_from_slice(b"swh-");
        crate::digest::hex_into(&mut bytes[4..32], &digest[..14]);
        ClientOrderId { len: 32, bytes }
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        // Checked on construction: ASCII only, so any prefix is UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl Default for ClientOrderId {
    fn default() -> Self {
        ClientOrderId::NONE
    }
}

impl Deref for ClientOrderId {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ClientOrderId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ClientOrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ClientOrderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::str::FromStr for ClientOrderId {
    type Err = ClientOrderIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ClientOrderId::new(s)
    }
}

impl TryFrom<&str> for ClientOrderId {
    type Error = ClientOrderIdError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        ClientOrderId::new(s)
    }
}

impl PartialEq<str> for ClientOrderId {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ClientOrderId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for ClientOrderId {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<ClientOrderId> for str {
    fn eq(&self, other: &ClientOrderId) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<ClientOrderId> for &str {
    fn eq(&self, other: &ClientOrderId) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<ClientOrderId> for String {
    fn eq(&self, other: &ClientOrderId) -> bool {
        self == other.as_str()
    }
}

impl From<ClientOrderId> for String {
    fn from(id: ClientOrderId) -> String {
        id.as_str().to_owned()
    }
}

impl Serialize for ClientOrderId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ClientOrderId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        ClientOrderId::new(&s).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_every_broker_takes_and_refuses_the_rest() {
        let id = ClientOrderId::new("swh-0123456789abcdef0123456789ab").unwrap();
        assert_eq!((id.as_str(), id.len()), ("swh-0123456789abcdef0123456789ab", 32));
        assert_eq!(id, "swh-0123456789abcdef0123456789ab");
        assert_eq!(ClientOrderId::new(&"x".repeat(48)).unwrap().len(), 48);
        assert_eq!(ClientOrderId::new(&"x".repeat(49)), Err(ClientOrderIdError::TooLong(49)));
        assert_eq!(ClientOrderId::new("").unwrap(), ClientOrderId::default());
        assert!(ClientOrderId::default().is_empty());
        for bad in ["a b", "a\u{0}", "é", "a\n"] {
            assert_eq!(ClientOrderId::new(bad), Err(ClientOrderIdError::BadCharacter), "{bad:?}");
        }
    }

    #[test]
    fn reads_and_writes_as_a_json_string() {
        let id: ClientOrderId = serde_json::from_str(r#""swh-1""#).unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""swh-1""#);
        assert_eq!(format!("{id} {id:?}"), r#"swh-1 "swh-1""#);
        let err = serde_json::from_str::<ClientOrderId>(r#""a b""#).unwrap_err().to_string();
        assert!(err.contains("printable ASCII"), "{err}");
        // Escaped JSON text is read through its unescaped form.
        assert_eq!(serde_json::from_str::<ClientOrderId>(r#""a\u002db""#).unwrap(), "a-b");
    }
}
