//! `application/x-www-form-urlencoded` bodies, for brokers that take forms (Tradier).

use std::fmt::Write;

/// Builds an encoded form body, keys in the order given.
#[derive(Debug, Default, Clone)]
pub struct Form(String);

impl Form {
    /// An empty form.
    pub fn new() -> Form {
        Form(String::new())
    }

    /// Appends `key=value`, both percent-encoded.
    pub fn push(&mut self, key: &str, value: &str) -> &mut Form {
        if !self.0.is_empty() {
            self.0.push('&');
        }
        encode_into(&mut self.0, key);
        self.0.push('=');
        encode_into(&mut self.0, value);
        self
    }

    /// The encoded body.
    pub fn finish(self) -> String {
        self.0
    }
}

/// Percent-encodes per the WHATWG urlencoded serializer: space becomes `+`.
fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => out.push(b as char),
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

/// Decodes a form body into pairs (for tests and for hosts that inspect requests).
pub fn decode(body: &str) -> Vec<(String, String)> {
    fn dec(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                        Ok(v) => {
                            out.push(v);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    body.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (dec(k), dec(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_are_encoded_and_decoded() {
        let mut f = Form::new();
        f.push("option_symbol[0]", "SPXW240119C04500000").push("tag", "a b");
        let s = f.finish();
        assert_eq!(s, "option_symbol%5B0%5D=SPXW240119C04500000&tag=a+b");
        assert_eq!(
            decode(&s),
            vec![("option_symbol[0]".into(), "SPXW240119C04500000".into()), ("tag".into(), "a b".into())]
        );
    }
}
