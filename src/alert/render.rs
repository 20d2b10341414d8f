//! Canonical alerts written back out: as JSON (the Outcome's `alerts`) and as
//! `KEY=VALUE` text, each of which parses back to the same alert.

use super::{Alert, Leg, Position};
use crate::decimal::JsonNumber;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

impl Serialize for Alert {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("action", self.action.as_str())?;
        m.serialize_entry("instrument", &self.instrument)?;
        m.serialize_entry("direction", &self.direction.map(|d| d.as_str()))?;
        m.serialize_entry("price", &self.price.as_ref().map(JsonNumber))?;
        if let Some(t) = self.order_type {
            m.serialize_entry("order_type", t.as_str())?;
        }
        if let Some(d) = self.duration {
            m.serialize_entry("duration", d.as_str())?;
        }
        if let Some(q) = &self.quantity {
            m.serialize_entry("quantity", &JsonNumber(q))?;
        }
        if let Some(n) = &self.notional {
            m.serialize_entry("notional", &JsonNumber(n))?;
        }
        if let Some(t) = self.target {
            m.serialize_entry("target", t.as_str())?;
        }
        if let Some(id) = &self.order_id {
            m.serialize_entry("order_id", id)?;
        }
        if !self.legs.is_empty() {
            m.serialize_entry("legs", &self.legs)?;
        }
        if let Some(id) = &self.message_id {
            m.serialize_entry("message_id", id)?;
        }
        if let Some(t) = self.sent_at_ms {
            m.serialize_entry("time", &t)?;
        }
        // Under its own key, so that it reads back as the same key's unread time.
        if let Some(u) = &self.unread_time {
            m.serialize_entry(u.key.as_str(), &u.value)?;
        }
        if let Some(u) = &self.unread_contract {
            m.serialize_entry(u.key.as_str(), &u.contract)?;
        }
        if let Some(d) = self.held_before {
            m.serialize_entry("prevMarketPosition", position_word(d))?;
        }
        if let Some(l) = self.max_lag_s {
            m.serialize_entry("max_lag", &l)?;
        }
        if let Some(t) = self.limit_target {
            m.serialize_entry("limit_price_type", t.as_str())?;
        }
        m.end()
    }
}

/// The side held before the fill as TradingView writes it (`{{strategy.prev_market_position}}`).
fn position_word(p: Position) -> &'static str {
    match p {
        Position::Long => "long",
        Position::Short => "short",
        Position::Flat => "flat",
    }
}

impl Serialize for Leg {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if let Some(v) = &self.symbol {
            m.serialize_entry("symbol", v)?;
        }
        if let Some(v) = self.side {
            m.serialize_entry("side", v.as_str())?;
        }
        if let Some(v) = self.action {
            m.serialize_entry("action", v.as_str())?;
        }
        if let Some(v) = &self.strike {
            m.serialize_entry("strike", &JsonNumber(v))?;
        }
        if let Some(v) = &self.expiration {
            m.serialize_entry("expiration", &v.to_string())?;
        }
        if let Some(v) = &self.price {
            m.serialize_entry("price", &JsonNumber(v))?;
        }
        if let Some(v) = &self.live_price {
            m.serialize_entry("live_price", &JsonNumber(v))?;
        }
        m.end()
    }
}

impl Alert {
    /// The alert as JSON with exact numbers. When parsed back (legs and `message_id`
    /// included) it yields this alert again.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The alert as `KEY=VALUE` text separated by `;`, readable by the text parser.
    /// Legs are left out: they need JSON.
    pub fn to_text(&self) -> String {
        let mut out = format!("ticker={};action={}", self.instrument, self.action.as_str());
        if let Some(d) = self.direction {
            out.push_str(";direction=");
            out.push_str(d.as_str());
        }
        if let Some(p) = &self.price {
            out.push_str(&format!(";price={p}"));
        }
        if let Some(t) = self.order_type {
            out.push_str(";order_type=");
            out.push_str(t.as_str());
        }
        if let Some(d) = self.duration {
            out.push_str(";duration=");
            out.push_str(d.as_str());
        }
        if let Some(q) = &self.quantity {
            out.push_str(&format!(";quantity={q}"));
        }
        if let Some(n) = &self.notional {
            out.push_str(&format!(";notional={n}"));
        }
        if let Some(t) = self.target {
            out.push_str(";target=");
            out.push_str(t.as_str());
        }
        if let Some(id) = &self.order_id {
            out.push_str(";order_id=");
            out.push_str(id);
        }
        if let Some(id) = &self.message_id {
            out.push_str(";message_id=");
            out.push_str(id);
        }
        if let Some(t) = self.sent_at_ms {
            out.push_str(&format!(";time={t}"));
        }
        if let Some(u) = &self.unread_time {
            out.push_str(&format!(";{}={}", u.key, u.value));
        }
        if let Some(u) = &self.unread_contract {
            out.push_str(&format!(";{}={}", u.key, u.contract));
        }
        if let Some(d) = self.held_before {
            out.push_str(";prevMarketPosition=");
            out.push_str(position_word(d));
        }
        if let Some(l) = self.max_lag_s {
            out.push_str(&format!(";max_lag={l}"));
        }
        if let Some(t) = self.limit_target {
            out.push_str(";limit_price_type=");
            out.push_str(t.as_str());
        }
        out
    }
}
