//! Test support shared by the golden and per-broker tests: order fixtures, a JSON reader
//! that keeps numbers as their digits (serde_json's `Value` would turn `2.35` into a
//! float), and the request comparator the golden README describes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use strategy_webhook::alert::{Date, Duration, LegAction, OptionSide, OrderType};
use strategy_webhook::broker::{self, form, Body, BrokerId, Request};
use strategy_webhook::decimal::Decimal;
use strategy_webhook::model::{
    AssetClass, BotAction, CryptoPair, Intent, OptionContract, Order, OrderError, OrderLeg, PriceEffect,
};

// ---------------------------------------------------------------------------------------
// A JSON value with numbers kept as text.

/// A parsed JSON value; numbers keep the digits they were written with.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<V>),
    Obj(Vec<(String, V)>),
}

impl V {
    pub fn get(&self, key: &str) -> Option<&V> {
        match self {
            V::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn str(&self) -> Option<&str> {
        match self {
            V::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A number or numeric string as text.
    pub fn text(&self) -> Option<&str> {
        match self {
            V::Str(s) | V::Num(s) => Some(s),
            _ => None,
        }
    }
}

/// Parses one JSON document; errors say where.
pub fn parse_json(text: &str) -> Result<V, String> {
    let mut p = Parser { b: text.as_bytes(), i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != p.b.len() {
        return Err(format!("trailing characters at byte {}", p.i));
    }
    Ok(v)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }

    fn value(&mut self) -> Result<V, String> {
        self.ws();
        match self.b.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut m = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(V::Obj(m));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.eat(b':')?;
                    let v = self.value()?;
                    m.push((k, v));
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(V::Obj(m));
                        }
                        _ => return Err(format!("expected ',' or '}}' at byte {}", self.i)),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(V::Arr(a));
                }
                loop {
                    a.push(self.value()?);
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(V::Arr(a));
                        }
                        _ => return Err(format!("expected ',' or ']' at byte {}", self.i)),
                    }
                }
            }
            Some(b'"') => Ok(V::Str(self.string()?)),
            Some(b't') => self.word("true", V::Bool(true)),
            Some(b'f') => self.word("false", V::Bool(false)),
            Some(b'n') => self.word("null", V::Null),
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.b.len() && matches!(self.b[self.i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    self.i += 1;
                }
                Ok(V::Num(String::from_utf8_lossy(&self.b[start..self.i]).into_owned()))
            }
            _ => Err(format!("unexpected character at byte {}", self.i)),
        }
    }

    fn word(&mut self, w: &str, v: V) -> Result<V, String> {
        if self.b[self.i..].starts_with(w.as_bytes()) {
            self.i += w.len();
            Ok(v)
        } else {
            Err(format!("bad literal at byte {}", self.i))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        if self.b.get(self.i) != Some(&b'"') {
            return Err(format!("expected a string at byte {}", self.i));
        }
        self.i += 1;
        let mut out = Vec::new();
        while let Some(&c) = self.b.get(self.i) {
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = *self.b.get(self.i).ok_or("unterminated escape")?;
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let hex = std::str::from_utf8(self.b.get(self.i..self.i + 4).ok_or("short \\u")?)
                                .map_err(|e| e.to_string())?;
                            let cp = u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                            self.i += 4;
                            let ch = char::from_u32(cp).ok_or("surrogate escapes are not needed here")?;
                            out.extend_from_slice(ch.to_string().as_bytes());
                        }
                        _ => return Err(format!("bad escape at byte {}", self.i)),
                    }
                }
                _ => out.push(c),
            }
        }
        Err("unterminated string".into())
    }
}

// ---------------------------------------------------------------------------------------
// Comparison.

/// How values compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Golden README default: numbers and numeric strings compare by decimal value
    /// (`10`, `10.0` and `"10"` are equal).
    ByValue,
    /// Coinbase: where the expectation is a string the request must send a string (its
    /// decimal value compared when numeric); a number where a string is expected fails.
    StringsOnly,
    /// Own tests: JSON types must match; numbers compare by decimal value, strings exactly.
    Strict,
}

/// A plain decimal (`-12.50`), nothing looser: option symbols and ids stay strings.
pub fn decimal_of(s: &str) -> Option<Decimal> {
    let t = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let ok = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
        && (frac.is_empty() != t.contains('.'));
    if !ok {
        return None;
    }
    Decimal::from_str_exact(s).ok()
}

/// Compares `actual` to `expected`; the error names the first difference's path.
pub fn compare(expected: &V, actual: &V, mode: Mode) -> Result<(), String> {
    cmp(expected, actual, mode, "$")
}

fn cmp(e: &V, a: &V, mode: Mode, path: &str) -> Result<(), String> {
    let differ = || Err(format!("{path}: expected {e:?}, got {a:?}"));
    match (e, a) {
        (V::Obj(em), V::Obj(am)) => {
            let em = as_map(em, path, "expected")?;
            let am = as_map(am, path, "request")?;
            if let Some(k) = em.keys().find(|k| !am.contains_key(*k)) {
                return Err(format!("{path}: missing key {k:?}"));
            }
            if let Some(k) = am.keys().find(|k| !em.contains_key(*k)) {
                return Err(format!("{path}: unexpected key {k:?}"));
            }
            for (k, ev) in &em {
                cmp(ev, am[k], mode, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (V::Arr(ea), V::Arr(aa)) => {
            if ea.len() != aa.len() {
                return Err(format!("{path}: expected {} items, got {}", ea.len(), aa.len()));
            }
            for (i, (ev, av)) in ea.iter().zip(aa).enumerate() {
                cmp(ev, av, mode, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (V::Null, V::Null) => Ok(()),
        (V::Bool(x), V::Bool(y)) if x == y => Ok(()),
        (V::Num(x), V::Num(y)) if same_decimal(x, y) => Ok(()),
        (V::Str(x), V::Str(y)) => {
            let equal = match mode {
                Mode::Strict => x == y,
                _ => x == y || (decimal_of(x).is_some() && same_decimal(x, y)),
            };
            if equal {
                Ok(())
            } else {
                differ()
            }
        }
        (V::Num(x), V::Str(y)) | (V::Str(y), V::Num(x)) if mode == Mode::ByValue && same_decimal(x, y) => Ok(()),
        _ => differ(),
    }
}

fn same_decimal(x: &str, y: &str) -> bool {
    match (decimal_of(x), decimal_of(y)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn as_map<'a>(m: &'a [(String, V)], path: &str, whose: &str) -> Result<BTreeMap<&'a str, &'a V>, String> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        if out.insert(k.as_str(), v).is_some() {
            return Err(format!("{path}: the {whose} repeats key {k:?}"));
        }
    }
    Ok(out)
}

/// Form bodies: sets of decoded pairs (order free, no key twice), values compared by
/// decimal value where both are numeric (`ByValue`) or exactly (`Strict`).
pub fn compare_form(expected: &str, actual: &str, mode: Mode) -> Result<(), String> {
    let to_map = |body: &str, whose: &str| -> Result<BTreeMap<String, String>, String> {
        let mut m = BTreeMap::new();
        for (k, v) in form::decode(body) {
            if m.insert(k.clone(), v).is_some() {
                return Err(format!("the {whose} form repeats {k:?}"));
            }
        }
        Ok(m)
    };
    let e = to_map(expected, "expected")?;
    let a = to_map(actual, "request")?;
    if let Some(k) = e.keys().find(|k| !a.contains_key(*k)) {
        return Err(format!("form: missing {k:?}"));
    }
    if let Some(k) = a.keys().find(|k| !e.contains_key(*k)) {
        return Err(format!("form: unexpected {k:?}={:?}", a[k]));
    }
    for (k, ev) in &e {
        let av = &a[k];
        let equal = ev == av || (mode != Mode::Strict && decimal_of(ev).is_some() && same_decimal(ev, av));
        if !equal {
            return Err(format!("form: {k} expected {ev:?}, got {av:?}"));
        }
    }
    Ok(())
}

/// Drops top-level keys the golden case says to leave out.
pub fn without_keys(v: &V, ignore: &[String]) -> V {
    match v {
        V::Obj(m) => V::Obj(m.iter().filter(|(k, _)| !ignore.contains(k)).cloned().collect()),
        other => other.clone(),
    }
}

/// Checks a formatted request against an expected method, path, content type and body
/// (`None` for no body; JSON text for JSON; encoded form text for forms).
pub fn check(req: &Request, method: &str, path: &str, body: Option<&str>, mode: Mode) -> Result<(), String> {
    if req.method.as_str() != method {
        return Err(format!("method: expected {method}, got {}", req.method.as_str()));
    }
    if req.path != path {
        return Err(format!("path: expected {path}, got {}", req.path));
    }
    match (body, &req.body) {
        (None, Body::Empty) => {
            if req.content_type.is_some() {
                return Err(format!("an empty body has content type {:?}", req.content_type));
            }
            Ok(())
        }
        (Some(e), Body::Json(_)) => {
            if req.content_type != Some(broker::JSON) {
                return Err(format!("content type: expected application/json, got {:?}", req.content_type));
            }
            let sent = String::from_utf8(req.body.to_bytes()).map_err(|e| e.to_string())?;
            let actual = parse_json(&sent).map_err(|m| format!("the request body is not JSON ({m}): {sent}"))?;
            let expected = parse_json(e).map_err(|m| format!("bad expectation ({m}): {e}"))?;
            compare(&expected, &actual, mode).map_err(|m| format!("{m}\n  sent: {sent}"))
        }
        (Some(e), Body::Form(f)) => {
            if req.content_type != Some(broker::FORM) {
                return Err(format!("content type: expected a form, got {:?}", req.content_type));
            }
            compare_form(e, f, mode).map_err(|m| format!("{m}\n  sent: {f}"))
        }
        (e, b) => Err(format!("body: expected {e:?}, got {b:?}")),
    }
}

// ---------------------------------------------------------------------------------------
// Order fixtures.

pub fn d(s: &str) -> Decimal {
    strategy_webhook::decimal::parse(s).unwrap_or_else(|| panic!("bad decimal {s:?}"))
}

pub const CLIENT_ID: &str = "swh-0123456789abcdef0123456789ab";

/// An equity order; `price` makes it a limit order.
pub fn equity(symbol: &str, intent: Intent, quantity: &str, price: Option<&str>, duration: Duration) -> Order {
    Order {
        asset_class: AssetClass::Equity,
        symbol: symbol.into(),
        pair: None,
        intent,
        quantity: d(quantity),
        order_type: if price.is_some() { OrderType::Limit } else { OrderType::Market },
        limit_price: price.map(d),
        price_effect: None,
        duration,
        legs: Vec::new(),
        client_order_id: CLIENT_ID.parse().unwrap(),
        reference_price: None,
    }
}

/// A crypto order for `pair` (any spelling).
pub fn crypto(pair: &str, intent: Intent, quantity: &str, price: Option<&str>, duration: Duration) -> Order {
    let p = CryptoPair::parse(pair).expect("a crypto pair");
    Order { asset_class: AssetClass::Crypto, pair: Some(p), ..equity(pair, intent, quantity, price, duration) }
}

/// One option leg.
pub fn leg(root: &str, expiration: &str, side: OptionSide, strike: &str, action: LegAction, ratio: u32) -> OrderLeg {
    OrderLeg {
        contract: OptionContract {
            root: root.into(),
            expiration: Date::parse_iso(expiration).expect("a date"),
            side,
            strike: d(strike),
        },
        action,
        ratio,
    }
}

/// An option order on `underlying`; `price` (magnitude) with `effect` makes it a limit order.
pub fn option(
    underlying: &str,
    legs: Vec<OrderLeg>,
    quantity: &str,
    price: Option<(&str, PriceEffect)>,
    duration: Duration,
) -> Order {
    let intent = if legs.first().is_some_and(|l| !l.action.is_open()) { Intent::CloseLong } else { Intent::OpenLong };
    Order {
        asset_class: AssetClass::Option,
        symbol: underlying.into(),
        pair: None,
        intent,
        quantity: d(quantity),
        order_type: if price.is_some() { OrderType::Limit } else { OrderType::Market },
        limit_price: price.map(|(p, _)| d(p)),
        price_effect: price.map(|(_, e)| e),
        duration,
        legs,
        client_order_id: CLIENT_ID.parse().unwrap(),
        reference_price: None,
    }
}

pub fn place(b: BrokerId, account: &str, order: &Order) -> Result<Request, OrderError> {
    broker::format(b, account, &BotAction::Place(order.clone()))
}

pub fn replace(
    b: BrokerId,
    account: &str,
    id: &str,
    order: &Order,
    quantity_changed: bool,
) -> Result<Request, OrderError> {
    replace_after_fills(b, account, id, order, quantity_changed, Decimal::ZERO)
}

/// [`replace`] of a working order of which `filled` has filled already.
pub fn replace_after_fills(
    b: BrokerId,
    account: &str,
    id: &str,
    order: &Order,
    quantity_changed: bool,
    filled: Decimal,
) -> Result<Request, OrderError> {
    let action = BotAction::Replace { order_id: id.into(), order: order.clone(), quantity_changed, filled };
    broker::format(b, account, &action)
}

pub fn cancel(b: BrokerId, account: &str, id: &str, order: &Order) -> Result<Request, OrderError> {
    broker::format(b, account, &BotAction::Cancel { order_id: id.into(), order: order.clone() })
}
