//! One word table per domain enum.
//!
//! `words!` declares an enum together with its canonical word and the
//! synonyms senders use, once, and derives from that single table everything that reads
//! or writes the enum as text: `as_str`, `from_word` (trimmed, any case), `Display`,
//! `FromStr`, and serde's `Serialize` and `Deserialize`. The alert parsers, the snapshot
//! loader and the Outcome JSON therefore accept and write exactly the same words.

use std::fmt;

/// A word that is none of an enum's accepted words. The message lists them, so a typo in a
/// snapshot names what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{word:?} is not one of: {}", accepted(self.words))]
pub struct UnknownWord {
    /// The word as given.
    pub word: String,
    /// Every accepted word, canonical ones first within each variant.
    pub words: &'static [&'static str],
}

/// The accepted words, lower-case, for messages.
fn accepted(words: &[&str]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&w.to_ascii_lowercase());
    }
    out
}

/// `str::trim`, answered at once for text that starts and ends with a printable ASCII
/// byte (no whitespace of any kind at either end), as nearly every word and field value
/// does; anything else takes `str::trim` itself.
pub(crate) fn trim(s: &str) -> &str {
    match (s.as_bytes().first(), s.as_bytes().last()) {
        (Some(a), Some(z)) if a.is_ascii_graphic() && z.is_ascii_graphic() => s,
        _ => s.trim(),
    }
}

/// A serde visitor for word enums: reads a string and looks it up with `from_word`.
#[doc(hidden)]
pub struct WordVisitor<T> {
    /// The lookup.
    pub read: fn(&str) -> Option<T>,
    /// Every accepted word, for the error.
    pub words: &'static [&'static str],
}

impl<T> serde::de::Visitor<'_> for WordVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "one of: {}", accepted(self.words))
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
        (self.read)(s).ok_or_else(|| E::custom(UnknownWord { word: s.to_string(), words: self.words }))
    }
}

/// Declares a word enum: each variant with its canonical word (what `as_str`, `Display`
/// and `Serialize` write) and any synonyms `from_word` also reads.
///
/// ```ignore
/// words! {
///     /// Call or put.
///     pub enum OptionSide {
///         /// A call option.
///         Call = "CALL" | "c",
///         /// A put option.
///         Put = "PUT" | "p",
///     }
/// }
/// ```
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $canon:literal $(| $syn:literal)* ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every accepted word, each variant's canonical word first.
            pub const WORDS: &'static [&'static str] = &[$($canon, $($syn,)*)+];

            const TABLE: &'static [(&'static str, $name)] = &[$(($canon, $name::$variant), $(($syn, $name::$variant),)*)+];

            /// The canonical word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $canon),+
                }
            }

            /// Reads any accepted word, in any case, surrounding whitespace ignored.
            pub fn from_word(s: &str) -> Option<$name> {
                let s = $crate::model::words::trim(s);
                Self::TABLE.iter().find(|(w, _)| s.eq_ignore_ascii_case(w)).map(|(_, v)| *v)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::model::words::UnknownWord;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::from_word(s)
                    .ok_or_else(|| $crate::model::words::UnknownWord { word: s.to_string(), words: $name::WORDS })
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str($crate::model::words::WordVisitor { read: $name::from_word, words: $name::WORDS })
            }
        }
    };
}
pub(crate) use words;

#[cfg(test)]
mod tests {
    crate::model::words::words! {
        /// A test enum.
        enum Light {
            /// Go.
            Green = "green" | "g",
            /// Stop.
            Red = "RED",
        }
    }

    #[test]
    fn one_table_reads_and_writes() {
        assert_eq!(Light::from_word(" G "), Some(Light::Green));
        assert_eq!(Light::from_word("red"), Some(Light::Red));
        assert_eq!(Light::from_word("amber"), None);
        assert_eq!(Light::Red.to_string(), "RED");
        assert_eq!("GREEN".parse::<Light>(), Ok(Light::Green));
        assert_eq!(serde_json::to_string(&Light::Green).unwrap(), "\"green\"");
        assert_eq!(serde_json::from_str::<Light>("\"g\"").unwrap(), Light::Green);
        let e = serde_json::from_str::<Light>("\"amber\"").unwrap_err().to_string();
        assert!(e.contains("\"amber\" is not one of: green, g, red"), "{e}");
        assert_eq!(Light::ALL, &[Light::Green, Light::Red]);
    }
}
