//! Bots' positions and working orders as the server keeps them, and the paper broker that changes them.
//!
//! The core decides CLOSE, MODIFY and CANCEL against the snapshot's `positions` and `working_orders`; the
//! server keeps those per (strategy, bot), stores them in SQLite, and puts them into the engine's snapshot
//! after every change (see `App::refresh_bots`).
//!
//! Each outbox row carries the core's broker-neutral [`Order`] for its request, exactly as the Outcome gave it
//! (`OrderRequest::order`, stored as its JSON): instrument or legs, intent, quantity from the bot's sizing,
//! market or limit, price, and the reference price the order was sized from. The paper broker applies that
//! order; the http delivery uses it to record the working orders a broker answers with. The server never
//! decides an order again.

use serde::{Deserialize, Serialize};
use strategy_webhook::decimal::Decimal;
use strategy_webhook::model::{AssetClass, Direction, InstrumentKey, Order, OrderIntent, OrderType, PriceEffect};
use strategy_webhook::outcome::RequestKind;
use strategy_webhook::strategy::{Bot, Position, WorkingOrder};

/// One open position, in the snapshot's own JSON shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PositionRec {
    /// Instrument.
    pub instrument: String,
    /// `long` or `short`.
    pub direction: String,
    /// Size.
    #[serde(with = "dec")]
    pub quantity: Decimal,
    /// Average fill price (paper only; not part of the snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_dec")]
    pub avg_price: Option<Decimal>,
    /// Option legs, for option positions read from a broker (in the snapshot's `legs` shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub legs: Vec<LegRec>,
}

/// One working order, in the snapshot's own JSON shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OrderRec {
    /// The broker's order id (the paper broker's own for paper bots).
    pub id: String,
    /// Instrument.
    pub instrument: String,
    /// `long` or `short`.
    pub direction: String,
    /// `entry` or `exit`.
    pub intent: String,
    /// `market` or `limit`.
    pub order_type: String,
    /// Limit price.
    #[serde(default, with = "opt_dec")]
    pub price: Option<Decimal>,
    /// Size: what remains to fill; 0 for an order whose size is not known (`size_known`).
    #[serde(with = "dec")]
    pub quantity: Decimal,
    /// False for an order whose broker states no count of it (the snapshot's `size_known`): a trader's order sized
    /// by an amount of money, or one read with no size. Kept, so that a CLOSE pulls it before selling beside it;
    /// nothing is sized from it.
    #[serde(default = "known", skip_serializing_if = "is_known")]
    pub size_known: bool,
    /// The amount of money the order was sized by, when that is why its size is not known (the snapshot's
    /// `notional`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_dec")]
    pub notional: Option<Decimal>,
    /// What of it has filled already, as the broker read back says (a partly filled order).
    #[serde(default, with = "dec", skip_serializing_if = "Decimal::is_zero")]
    pub filled: Decimal,
    /// Time in force.
    #[serde(default = "day")]
    pub duration: String,
    /// `open` or `pending` while working.
    pub state: String,
    /// Option legs, for option orders (in the snapshot's `legs` shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub legs: Vec<LegRec>,
}

/// One option leg of a working order, in the snapshot's own JSON shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LegRec {
    /// OCC symbol.
    pub symbol: String,
    /// `buy_to_open`, `sell_to_open`, …
    pub action: String,
    /// Contracts per unit.
    pub ratio: u32,
}

fn day() -> String {
    "day".into()
}

fn known() -> bool {
    true
}

fn is_known(known: &bool) -> bool {
    *known
}

/// A bot's positions and working orders.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BotState {
    /// Open positions.
    #[serde(default)]
    pub positions: Vec<PositionRec>,
    /// Working orders.
    #[serde(default)]
    pub working_orders: Vec<OrderRec>,
    /// The paper broker's next order number (so ids stay unique across restarts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_id: u64,
    /// The orders this bot replaced with a new one (cancel and replace) that the broker may still list as
    /// working while the replace completes (Alpaca's `pending_replace`, Schwab's `PENDING_REPLACE`,
    /// Tastytrade's `Replace Requested`): the sync leaves them out of the working orders while their replacement
    /// stands (see `sync::drop_replaced`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<Replaced>,
    /// Working orders this bot's own cancels pulled lately, each with the cancel's client order id: a re-size at a
    /// broker that cannot change a size in place is a cancel and a new order waiting for it, and the new order is
    /// noted as the pulled one's replacement ([`BotState::rest_after`]), so that a CANCEL decided against the old
    /// order before the re-size was delivered is aimed at the new one. Without the note it reached the order
    /// already cancelled, read it back cancelled, and was marked done while the new order worked on. The note
    /// stays, marked with the order that stood in ([`Pulled::stood_in`]), for a later re-size's cancel of the
    /// pulled order (`dispatch::taken_out_before`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pulled: Vec<Pulled>,
    /// The broker and account this state describes: the bot's when the read that made it was issued (a sync),
    /// when the paper broker filled, or when the operator set it. A state of another broker, or of another
    /// account where the broker's requests name it, is never used for the bot (`App` checks it wherever a state
    /// is put into use): a CLOSE would send the old account's quantity to the new one. `None` in states stored
    /// before it was recorded, which are used as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<StateSource>,
}

/// Where a bot's state was read ([`BotState::source`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StateSource {
    /// The broker, as a strategy names it. Text rather than the enum, so that a state naming a broker this
    /// version does not know still loads (and, naming no broker of the bot's, is not used for it).
    pub broker: String,
    /// The account id the reads named (kept even where the account is the credentials', for the operator).
    pub account: String,
    /// Whether the paper broker made the state (its simulated book, not a read of the account): never the
    /// account's for a bot since switched to a real broker, which would otherwise close the paper position's
    /// quantity at the broker until its first read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paper: bool,
    /// Where the reads went (the bots file's target: the base URL and the keys' fingerprint,
    /// [`crate::bots::HttpBot::target`]). A broker whose paper-trading and live endpoints take the same keys'
    /// account from the credentials (Alpaca, Coinbase's sandbox) names no account in its paths: without this, the
    /// paper endpoint's positions were used at the live one, and a CLOSE sold there what only the paper account
    /// held; so were one account's at another whose keys replaced its own on the same URL. `None` in states stored
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl StateSource {
    /// Where `bot` is configured to trade now.
    pub fn of(bot: &Bot) -> StateSource {
        StateSource {
            broker: bot.broker.as_str().to_owned(),
            account: bot.account_id.clone(),
            paper: false,
            target: None,
        }
    }

    /// Whether a state read here describes what `bot` holds as it is configured now: the same broker and, at a
    /// broker whose requests name the account, the same account. Where the credentials pick the account, an
    /// `account_id` edit is a new label for the same account, and the state (with what only it records, such
    /// as option positions' sides) still describes it.
    /// A paper book describes no account at all.
    pub fn fits(&self, bot: &Bot) -> bool {
        let broker = strategy_webhook::broker::BrokerId::from_name(&self.broker);
        !self.paper
            && broker == Some(bot.broker)
            && (!bot.broker.broker().names_account() || self.account == bot.account_id)
    }
}

/// An order replaced by another ([`BotState::replaced`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Replaced {
    /// The replaced order's id.
    pub old: String,
    /// Its replacement's id.
    pub new: String,
    /// When the replace was answered (Unix ms).
    pub at_ms: i64,
}

/// The most replaced orders a bot's state keeps (the oldest go first); a replace completes in moments.
const REPLACED_KEPT: usize = 32;

/// A working order a cancel of this bot's pulled ([`BotState::pulled`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pulled {
    /// The cancel's client order id.
    pub by: String,
    /// The order as the bot held it when it was pulled.
    pub order: OrderRec,
    /// When the cancel was answered (Unix ms).
    pub at_ms: i64,
    /// The id of the new order that stood in for it ([`BotState::rest_after`]): a re-size's. Kept for as long as the
    /// note, whatever became of that order: the `replaced` note goes once the new order is final (filled, say), and
    /// a second re-size decided against the pulled order before the first was delivered found nothing that took it
    /// out, read it back cancelled, and opened a new entry beside the filled one. Marked, the note stands in for
    /// nothing again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stood_in: Option<String>,
}

/// How long a pulled order is noted ([`BotState::pulled`]): a re-size's new order follows its cancel, but may wait
/// for a broker in back-off until its own deadline (a limit order's is an hour by default); the sync lets older notes
/// go. A note only ever matches a new order of the same alert (the cancel's client order id), so keeping it longer
/// costs nothing but its place among the [`REPLACED_KEPT`] kept.
pub const PULLED_KEPT_MS: i64 = 24 * 3_600_000;

/// Whether a position written `held` is the instrument `key`, as the core reads the snapshot: one pair whatever
/// its spelling (`BTCUSD`, `BTC/USD`, `BTC-USD`). Compared as text, a close sent as `BTC/USD` found no position
/// entered as `BTCUSD`, and entries under two spellings made two positions.
fn same(key: &InstrumentKey, held: &str, class: AssetClass) -> bool {
    // Read as the engine reads a held position (`NASDAQ:MSFT` is MSFT): the engine decided a CLOSE of a book's
    // prefixed position, and the paper broker refused it for want of one.
    held == key.as_str()
        || InstrumentKey::new(held, class) == *key
        || InstrumentKey::new(&strategy_webhook::alert::normalize_instrument(held), class) == *key
}

/// The same side, whatever its case (`Long` set through the admin API is the long side).
fn same_side(held: &str, direction: &str) -> bool {
    held.trim().eq_ignore_ascii_case(direction)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The highest paper order number among `ids` (`paper-7` → 7; 0 for none): a book's next order is numbered past it.
pub fn last_paper_id<'a>(ids: impl Iterator<Item = &'a str>) -> u64 {
    ids.filter_map(|id| id.strip_prefix("paper-")?.parse::<u64>().ok()).max().unwrap_or(0)
}

impl BotState {
    /// A paper book holding what the strategy file lists for `bot` (its `positions` and `working_orders`),
    /// stamped as the paper broker's at `source`. The engine decides against the file's lists while the bot has
    /// no state: the paper broker, filling against an empty book instead, refused the CLOSE the engine had
    /// answered processed.
    pub fn from_file(bot: &Bot, source: StateSource) -> BotState {
        let legs = |legs: &[strategy_webhook::strategy::HeldLeg]| {
            legs.iter()
                .map(|l| LegRec { symbol: l.symbol.clone(), action: l.action.as_str().to_owned(), ratio: l.ratio })
                .collect()
        };
        BotState {
            positions: bot
                .positions
                .iter()
                .map(|p| PositionRec {
                    instrument: p.instrument.clone(),
                    direction: direction_word(p.direction).to_owned(),
                    quantity: p.quantity,
                    avg_price: None,
                    legs: legs(&p.legs),
                })
                .collect(),
            working_orders: bot
                .working_orders
                .iter()
                .map(|o| OrderRec {
                    id: o.id.clone(),
                    instrument: o.instrument.clone(),
                    direction: direction_word(o.direction).to_owned(),
                    intent: o.intent.as_str().to_owned(),
                    order_type: o.order_type.map_or("other", |t| t.as_str()).to_owned(),
                    price: o.price,
                    quantity: o.quantity,
                    size_known: o.size_known,
                    notional: o.notional,
                    filled: o.filled,
                    duration: o.duration.map_or("other", |d| d.as_str()).to_owned(),
                    state: o.state.clone(),
                    legs: legs(&o.legs),
                })
                .collect(),
            // Past every paper id the file lists (an operator copying a book into it copies `paper-N` ids): a new
            // order numbered as a listed one was taken for it, and never entered the book.
            next_id: last_paper_id(bot.working_orders.iter().map(|o| o.id.as_str())),
            source: Some(source),
            ..BotState::default()
        }
    }

    /// The state as the core's snapshot types, or why it does not fit them.
    pub fn to_core(&self) -> Result<(Vec<Position>, Vec<WorkingOrder>), String> {
        let positions = self
            .positions
            .iter()
            .map(|p| {
                let v = serde_json::json!({ "instrument": p.instrument, "direction": p.direction,
                                            "quantity": p.quantity.to_string(), "legs": p.legs });
                serde_json::from_str(&v.to_string()).map_err(|e| format!("position {}: {e}", p.instrument))
            })
            .collect::<Result<Vec<Position>, String>>()?;
        let orders = self
            .working_orders
            .iter()
            .map(|o| {
                let v = serde_json::json!({ "id": o.id, "instrument": o.instrument, "direction": o.direction,
                    "intent": o.intent, "order_type": o.order_type, "price": o.price.map(|p| p.to_string()),
                    "quantity": o.quantity.to_string(), "size_known": o.size_known,
                    "notional": o.notional.map(|n| n.to_string()), "filled": o.filled.to_string(),
                    "duration": o.duration, "state": o.state, "legs": o.legs });
                serde_json::from_str(&v.to_string()).map_err(|e| format!("working order {}: {e}", o.id))
            })
            .collect::<Result<Vec<WorkingOrder>, String>>()?;
        Ok((positions, orders))
    }

    /// Brings the rows holding one instrument to the one net position a broker keeps: a book set through the admin
    /// API or seeded from a strategy file may hold it in several rows (two lots, `NASDAQ:MSFT` beside `MSFT`, both
    /// sides). Filled against the first row alone, a CLOSE logged as the whole amount left the other rows in the
    /// book, and the next one sold them again. Rows with option legs are left as they are.
    fn net(&mut self, class: AssetClass, key: &InstrumentKey) -> Result<(), String> {
        let rows: Vec<usize> = (0..self.positions.len())
            .filter(|&i| same(key, &self.positions[i].instrument, class) && self.positions[i].legs.is_empty())
            .collect();
        if rows.len() < 2 {
            return Ok(());
        }
        let overflow = || format!("the {} position would overflow", key.as_str());
        // Each side's size and average price, in the order held; the first row's name is kept.
        let (mut long, mut short) = ((Decimal::ZERO, None), (Decimal::ZERO, None));
        for &i in &rows {
            let p = &self.positions[i];
            let side = if same_side(&p.direction, "long") { &mut long } else { &mut short };
            side.1 = match (side.1, p.avg_price) {
                (Some(a), Some(b)) => weighted(a, side.0, b, p.quantity).or(Some(a)),
                (a, b) => a.or(b),
            };
            side.0 = side.0.checked_add(p.quantity).ok_or_else(overflow)?;
        }
        let mut first = self.positions[rows[0]].clone();
        for &i in rows.iter().rev() {
            self.positions.remove(i);
        }
        let (direction, quantity, avg_price) =
            if long.0 >= short.0 { ("long", long.0 - short.0, long.1) } else { ("short", short.0 - long.0, short.1) };
        if quantity > Decimal::ZERO {
            direction.clone_into(&mut first.direction);
            first.quantity = quantity;
            first.avg_price = avg_price;
            self.positions.insert(rows[0].min(self.positions.len()), first);
        }
        Ok(())
    }

    /// Adds to (or opens) a position.
    fn add(
        &mut self,
        class: AssetClass,
        instrument: &str,
        direction: &str,
        qty: Decimal,
        price: Option<Decimal>,
    ) -> Result<(), String> {
        let key = InstrumentKey::new(instrument, class);
        self.net(class, &key)?;
        // A broker keeps one net position per instrument: a fill on the other side of a held one (two alerts
        // decided before either filled) closes that first, and only what is left opens this side.
        let other = if same_side(direction, "long") { "short" } else { "long" };
        let mut qty = qty;
        if let Some(i) =
            self.positions.iter().position(|p| same(&key, &p.instrument, class) && same_side(&p.direction, other))
        {
            let held = self.positions[i].quantity;
            if qty < held {
                self.positions[i].quantity = held - qty;
                return Ok(());
            }
            self.positions.remove(i);
            qty -= held;
            if qty.is_zero() {
                return Ok(());
            }
        }
        if let Some(p) =
            self.positions.iter_mut().find(|p| same(&key, &p.instrument, class) && same_side(&p.direction, direction))
        {
            let total =
                p.quantity.checked_add(qty).ok_or_else(|| format!("the {instrument} position would overflow"))?;
            p.avg_price = match (p.avg_price, price) {
                (Some(a), Some(b)) => weighted(a, p.quantity, b, qty).or(p.avg_price),
                _ => price.or(p.avg_price),
            };
            p.quantity = total;
        } else {
            self.positions.push(PositionRec {
                instrument: instrument.to_owned(),
                direction: direction.to_owned(),
                quantity: qty,
                avg_price: price,
                legs: Vec::new(),
            });
        }
        Ok(())
    }

    /// Reduces a position; a position brought to zero (or below) is gone.
    fn reduce(&mut self, class: AssetClass, instrument: &str, direction: &str, qty: Decimal) -> Result<(), String> {
        let key = InstrumentKey::new(instrument, class);
        self.net(class, &key)?;
        let Some(i) =
            self.positions.iter().position(|p| same(&key, &p.instrument, class) && same_side(&p.direction, direction))
        else {
            return Err(format!("no {direction} position in {instrument} to close"));
        };
        let p = &mut self.positions[i];
        // A close larger than the position (or one that cannot be subtracted) leaves nothing.
        p.quantity = p.quantity.checked_sub(qty).unwrap_or(Decimal::ZERO);
        if p.quantity <= Decimal::ZERO {
            self.positions.remove(i);
        }
        Ok(())
    }

    /// Records a working order the broker accepted. One the state already holds by this id (a sync read the
    /// broker's list after it took the order and before its answer came back) stays as the broker listed it:
    /// held twice, a CLOSE would cancel it twice (the second refused, the close held back) and a MODIFY would
    /// count it as another exit. Its side and intent are the delivered order's, though: the sync guesses them
    /// from a listing (a bought put read as a long entry where the strategy's short side buys puts), keeps them
    /// by id from then on, and a CANCEL or CLOSE of the side that was sent found nothing.
    pub fn rest(&mut self, id: String, order: &Order) {
        if let Some(listed) = self.working_orders.iter_mut().find(|o| !id.is_empty() && o.id == id) {
            listed.direction = direction(order).to_owned();
            listed.intent = if order.intent.is_open() { "entry" } else { "exit" }.into();
            return;
        }
        self.working_orders.push(record(id, order));
    }

    /// Applies an accepted replace: new price and size, and the new id when the broker assigned one.
    pub fn replaced(&mut self, old_id: &str, new_id: Option<String>, order: &Order) -> bool {
        // A sync that read the list between the broker taking the replace and its answer holds the new order
        // already (beside the old, pending replace): that one stays, as listed, and the old goes, so that no id
        // is held twice.
        if let Some(n) = new_id.as_deref().filter(|n| *n != old_id && self.working_orders.iter().any(|o| o.id == *n)) {
            // The side recorded for the old order, not the one the sync guessed for the listed copy (see `rest`);
            // with the old one gone already (the sync read it replaced, a final status), the delivered order's,
            // which was built from it.
            let (direction, intent) = self
                .working_orders
                .iter()
                .find(|o| o.id == old_id)
                .map(|o| (o.direction.clone(), o.intent.clone()))
                .unwrap_or_else(|| {
                    (direction(order).to_owned(), if order.intent.is_open() { "entry" } else { "exit" }.into())
                });
            self.working_orders.retain(|o| o.id != old_id);
            if let Some(listed) = self.working_orders.iter_mut().find(|o| o.id == *n) {
                listed.direction = direction;
                listed.intent = intent;
            }
            self.note_replaced(old_id, n);
            return true;
        }
        match self.working_orders.iter_mut().find(|o| o.id == old_id) {
            Some(o) => {
                // Signed as `rest` records it: stored as the bare amount, a re-priced credit spread read back as
                // a debit, and a later size-only MODIFY sent it as one, marketable.
                o.price = signed_price(order);
                // The legs as sent, beside the quantity sent, as `record` keeps them: an order listed 2:2 goes out
                // in simplest ratios (one unit as two of 1:1), and its new quantity kept beside the old legs
                // recorded twice the contracts, which the next MODIFY sent. Fills the id keeps are recounted.
                if !order.legs.is_empty() {
                    let was = units_factor(&o.legs);
                    o.legs = leg_recs(order);
                    let filled = o.filled.checked_mul(was).and_then(|f| f.checked_div(units_factor(&o.legs)));
                    o.filled = filled.unwrap_or(o.filled);
                }
                o.quantity = order.quantity;
                o.duration = order.duration.as_str().to_owned();
                // A broker that cancels and replaces answers a new order, none of it filled; one that keeps the
                // id keeps the fills.
                if let Some(id) = new_id {
                    let new = id.clone();
                    o.id = id;
                    o.filled = Decimal::ZERO;
                    if new != old_id {
                        self.note_replaced(old_id, &new);
                    }
                }
                true
            }
            None => false,
        }
    }

    fn note_replaced(&mut self, old: &str, new: &str) {
        if self.replaced.len() >= REPLACED_KEPT {
            self.replaced.remove(0);
        }
        self.replaced.push(Replaced { old: old.to_owned(), new: new.to_owned(), at_ms: crate::app::now_ms() });
    }

    /// Drops a cancelled working order.
    pub fn cancelled(&mut self, id: &str) -> bool {
        let before = self.working_orders.len();
        self.working_orders.retain(|o| o.id != id);
        before != self.working_orders.len()
    }

    /// Drops a working order cancel `by` (its client order id) pulled, noting it ([`BotState::pulled`]). An order
    /// no longer listed (a sync read it back cancelled between the broker's answer and this record, or a restart
    /// in that instant) is noted all the same from `pulled`, the order the cancel was stored for: without the note,
    /// a re-size's new order stood in for nothing, and a CANCEL decided meanwhile reached the cancelled order, was
    /// marked done, and the new order worked on.
    pub fn cancelled_by(&mut self, id: &str, by: &str, pulled: Option<&Order>) -> bool {
        let order = match self.working_orders.iter().position(|o| o.id == id) {
            Some(i) => self.working_orders.remove(i),
            None => match pulled {
                Some(o) if !id.is_empty() && !self.pulled.iter().any(|p| p.by == by) => record(id.to_owned(), o),
                _ => return false,
            },
        };
        if self.pulled.len() >= REPLACED_KEPT {
            self.pulled.remove(0);
        }
        self.pulled.push(Pulled { by: by.to_owned(), order, at_ms: crate::app::now_ms(), stood_in: None });
        true
    }

    /// Records a working order the broker accepted ([`BotState::rest`]) that waited for cancel `after`: when it
    /// stands in for the order that cancel pulled (a re-size's new order: the same instrument, side, intent and
    /// type, another size, and the MODIFY's price if it sent one), it is noted as its replacement. `marked` is the
    /// row's own word on it ([`crate::dispatch::stands_in`]); without one (a row of an earlier version) an equal
    /// price tells a re-size from a CLOSE waiting for its exit's cancel.
    pub fn rest_after(&mut self, id: String, order: &Order, after: Option<&str>, marked: Option<bool>) {
        if marked == Some(false) {
            self.rest(id, order);
            return;
        }
        let intent = if order.intent.is_open() { OrderIntent::Entry } else { OrderIntent::Exit };
        let key = InstrumentKey::new(order.symbol.as_str(), order.asset_class);
        // The pulled order is compared as the engine reads the book (`NASDAQ:AAPL` is AAPL, `Long` is long, `LMT`
        // a limit): a book seeded from a strategy file or set through the admin API keeps its own spelling, and
        // compared as text the new order stood in for nothing, so a CANCEL or CLOSE decided meanwhile was refused.
        let stands_in = |p: &Pulled| {
            p.stood_in.is_none()
                && Some(p.by.as_str()) == after
                && same(&key, &p.order.instrument, order.asset_class)
                && same_side(&p.order.direction, direction(order))
                && OrderIntent::from_word(&p.order.intent) == Some(intent)
                // An entry after `cancel: true` is a new order, of the alert's own type: it stands in for the
                // entry pulled whatever its type (a limit entry for a market one queued before the open).
                && (OrderType::from_word(&p.order.order_type) == Some(order.order_type)
                    || (marked == Some(true) && intent == OrderIntent::Entry))
                && (marked == Some(true) || p.order.price == signed_price(order))
        };
        let old = self.pulled.iter_mut().find(|p| stands_in(p)).map(|p| {
            p.stood_in = Some(id.clone());
            p.order.id.clone()
        });
        self.rest(id.clone(), order);
        if let Some(old) = old.filter(|old| !id.is_empty() && *old != id) {
            self.note_replaced(&old, &id);
        }
    }
}

/// A working order as the bot records it, under `id`, from the order the broker accepted.
fn record(id: String, order: &Order) -> OrderRec {
    OrderRec {
        id,
        instrument: order.symbol.to_string(),
        direction: direction(order).to_owned(),
        intent: if order.intent.is_open() { "entry" } else { "exit" }.into(),
        order_type: order.order_type.as_str().to_owned(),
        price: signed_price(order),
        quantity: order.quantity,
        size_known: true,
        notional: None,
        filled: Decimal::ZERO,
        duration: order.duration.as_str().to_owned(),
        state: "open".into(),
        legs: leg_recs(order),
    }
}

/// An order's legs as the bot records them.
fn leg_recs(order: &Order) -> Vec<LegRec> {
    order
        .legs
        .iter()
        .map(|l| LegRec { symbol: l.contract.occ_unpadded(), action: l.action.as_str().to_owned(), ratio: l.ratio })
        .collect()
}

/// `quantity` of an option order whose legs have ratios `from`, counted in units of legs with ratios `to`: scaled by
/// the ratio of their greatest common divisors, as `BrokerOrder::matches` counts both sides (one unit listed 2:2 is
/// two of 1:1). As it is when either side has no legs (its units unknown); `None` on overflow.
pub fn recounted(
    quantity: Decimal,
    from: impl IntoIterator<Item = u32>,
    to: impl IntoIterator<Item = u32>,
) -> Option<Decimal> {
    let (mut from, mut to) = (from.into_iter().peekable(), to.into_iter().peekable());
    if from.peek().is_none() || to.peek().is_none() {
        return Some(quantity);
    }
    let (from, to) = (strategy_webhook::model::ratios_gcd(from), strategy_webhook::model::ratios_gcd(to));
    if from == to {
        return Some(quantity);
    }
    quantity.checked_mul(from.into())?.checked_div(to.into())
}

/// How many units in simplest ratios one unit of an order recorded with `legs` is, as the core builds orders from
/// it (`builder::option::held_factor`): the legs' greatest common divisor, 1 for a single leg (priced per contract
/// whatever its ratio). A vertical listed 2:2 is two.
pub fn units_factor(legs: &[LegRec]) -> Decimal {
    Decimal::from(strategy_webhook::model::simplest_factor(legs.iter().map(|l| l.ratio)))
}

/// The average price of `q1` at `p1` and `q2` at `p2`; `None` when it cannot be computed (no size, overflow).
fn weighted(p1: Decimal, q1: Decimal, p2: Decimal, q2: Decimal) -> Option<Decimal> {
    let total = q1.checked_add(q2).filter(|t| !t.is_zero())?;
    let cost = p1.checked_mul(q1)?.checked_add(p2.checked_mul(q2)?)?;
    Some(cost.checked_div(total)?.round_dp(6).normalize())
}

/// `long` or `short`, as the snapshot spells a position's direction.
fn direction(order: &Order) -> &'static str {
    direction_word(order.intent.direction())
}

/// A direction as the book writes it (and compares it, as text).
fn direction_word(d: Direction) -> &'static str {
    match d {
        Direction::Long => "long",
        Direction::Short => "short",
    }
}

/// Where a request stands among its alert's requests, as its outbox row says ([`apply_in`]).
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a> {
    /// The request's client order id: a cancel notes the order it pulled under it ([`BotState::pulled`]).
    pub by: &'a str,
    /// The client order id of the cancel the request waits for, if any.
    pub after: Option<&'a str>,
    /// The row's word on whether its order stands in for the one that cancel pulled
    /// ([`crate::dispatch::stands_in`]).
    pub stands_in: Option<bool>,
    /// For a cancel: its order, no longer in the book, was pulled by another request first, and nothing that
    /// request's pull holds back waits for this cancel (as `dispatch::taken_out_before` judges a broker's read-back
    /// of it cancelled). Such a cancel is done: its order is out of the market, as it was meant to be.
    pub pulled_before: bool,
}

/// [`apply_in`] for a request standing alone, as the tests send them.
#[cfg(test)]
pub fn apply(state: &mut BotState, kind: RequestKind, order_id: Option<&str>, order: &Order) -> Result<String, String> {
    apply_in(state, kind, order_id, order, None)
}

/// The paper broker: applies one request to a bot's state and says what happened, or why it refused.
///
/// Market orders fill at once at the order's reference price (the price the core sized it from: the alert's,
/// else the quote's mid, else its last); limit orders rest as working orders with ids `paper-N` (they never
/// fill on their own: there is no market feed) until a MODIFY changes them or a CANCEL removes them. Options
/// are not simulated.
///
/// A request of an alert's `chain` is recorded as an http bot's state records it: a cancel notes the order it
/// pulled, and a limit order resting after it is noted as that order's replacement when it stands in for it
/// ([`BotState::cancelled_by`], [`BotState::rest_after`]). Without the notes a CANCEL or CLOSE decided against an
/// order a re-size pulled was never aimed at the re-size's new order: on paper the CANCEL left the new order
/// working, and the CLOSE, its cancel refused, was held back with the position open.
pub fn apply_in(
    state: &mut BotState,
    kind: RequestKind,
    order_id: Option<&str>,
    order: &Order,
    chain: Option<Chain<'_>>,
) -> Result<String, String> {
    if order.asset_class == AssetClass::Option || !order.legs.is_empty() {
        return Err("the paper broker does not simulate option orders".into());
    }
    let (side, qty, instrument) = (order.side(), order.quantity, order.symbol.as_str());
    match kind {
        // A fill-or-kill order fills at once or not at all, and the paper broker fills no limit order (there is
        // no market feed): killed, never resting as a working order a MODIFY or CANCEL would then find.
        RequestKind::Place
            if order.order_type == OrderType::Limit && order.duration == strategy_webhook::model::Duration::Fok =>
        {
            let price = order.limit_price.map(|p| p.to_string()).unwrap_or_default();
            Ok(format!(
                "killed: {side} {qty} {instrument} @ {price} is fill-or-kill, and the paper broker fills no limit order"
            ))
        }
        RequestKind::Place if order.order_type == OrderType::Limit => {
            state.next_id += 1;
            let id = format!("paper-{}", state.next_id);
            match chain {
                Some(c) => state.rest_after(id.clone(), order, c.after, c.stands_in),
                None => state.rest(id.clone(), order),
            }
            let price = order.limit_price.map(|p| p.to_string()).unwrap_or_default();
            Ok(format!("working limit order {id}: {side} {qty} {instrument} @ {price}"))
        }
        RequestKind::Place => {
            if order.intent.is_open() {
                state.add(order.asset_class, instrument, direction(order), qty, order.reference_price)?;
            } else {
                state.reduce(order.asset_class, instrument, direction(order), qty)?;
            }
            let at = order.reference_price.map(|p| format!(" @ {p}")).unwrap_or_default();
            Ok(format!("filled: {side} {qty} {instrument}{at}"))
        }
        RequestKind::Replace => {
            let id = order_id.ok_or("a replace without an order id")?;
            if !state.replaced(id, None, order) {
                return Err(format!("no working order {id} to modify"));
            }
            let price = order.limit_price.map(|p| p.to_string()).unwrap_or_default();
            Ok(format!("modified working order {id}: {qty} {instrument} @ {price}"))
        }
        RequestKind::Cancel => {
            let id = order_id.ok_or("a cancel without an order id")?;
            // The book is the broker's list: an order not in it is no order to cancel, so no stored order stands
            // in for it (`cancelled_by`'s `pulled`).
            let done = match chain {
                Some(c) => state.cancelled_by(id, c.by, None),
                None => state.cancelled(id),
            };
            if done {
                return Ok(format!("cancelled working order {id}"));
            }
            match chain {
                // Where a broker reads the order back cancelled and the cancel is done, noting the pull as it does
                // (`dispatch::accepted`): refused instead, a `cancel: true` OPEN's new entry was held back behind
                // a CANCEL delivered first.
                Some(c) if c.pulled_before && !state.working_orders.iter().any(|o| o.id == id) => {
                    state.cancelled_by(id, c.by, Some(order));
                    Ok(format!("order {id} is no longer working (another request pulled it first): cancelled"))
                }
                _ => Err(format!("no working order {id} to cancel")),
            }
        }
    }
}

/// Decimals as JSON strings, so that `190.50` keeps its scale (the core reads strings and numbers).
mod dec {
    use serde::{Deserializer, Serializer};
    use strategy_webhook::decimal::Decimal;

    pub fn serialize<S: Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&d.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        strategy_webhook::decimal::deserialize(d)
    }
}

/// Optional decimals as JSON strings or null.
mod opt_dec {
    use serde::{Deserializer, Serializer};
    use strategy_webhook::decimal::Decimal;

    pub fn serialize<S: Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&d.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Decimal>, D::Error> {
        strategy_webhook::decimal::deserialize_opt(d)
    }
}

/// An order's limit price as the snapshot reads a working order's: a spread's signed net, negative for a credit.
fn signed_price(order: &Order) -> Option<Decimal> {
    order.limit_price.map(|p| match order.price_effect {
        Some(PriceEffect::Credit) if order.legs.len() > 1 => -p,
        _ => p,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An order as the Outcome writes it (and the outbox stores it).
    fn order(intent: &str, order_type: &str, extra: &str) -> Order {
        let limit = if order_type == "limit" { "190.10" } else { "null" };
        let json = format!(
            r#"{{"asset_class":"equity","symbol":"AAPL","intent":"{intent}","quantity":10,"order_type":"{order_type}",
                "limit_price":{limit},"duration":"day","legs":[],"client_order_id":"swh-1"{extra}}}"#
        );
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
    }

    /// A new order resting after a cancel of the same bot: a re-size's (marked as standing in) is the pulled order's
    /// replacement whatever its price; a CLOSE's (marked as not) is none, even at the pulled exit's own price; a row
    /// of an earlier version (no mark) stands in only at the pulled order's price.
    #[test]
    fn a_new_order_after_a_cancel_stands_in_as_its_row_says() {
        let pulled = || {
            let mut st = BotState::default();
            st.rest("old".into(), &order("close_long", "limit", ""));
            assert!(st.cancelled_by("old", "swh-cancel", None));
            st
        };
        let moved = {
            let mut o = order("close_long", "limit", "");
            o.limit_price = Some("195".parse().unwrap());
            o
        };
        let replaced = |st: &BotState| st.replaced.iter().map(|r| (r.old.clone(), r.new.clone())).collect::<Vec<_>>();
        let mut st = pulled();
        st.rest_after("new".into(), &moved, Some("swh-cancel"), Some(true));
        assert_eq!(replaced(&st), [("old".to_owned(), "new".to_owned())], "a re-size that moved the price");
        let mut st = pulled();
        st.rest_after("new".into(), &order("close_long", "limit", ""), Some("swh-cancel"), Some(false));
        assert!(replaced(&st).is_empty(), "a CLOSE at the exit's own price stands in for nothing");
        assert_eq!(st.working_orders.len(), 1);
        let mut st = pulled();
        st.rest_after("new".into(), &moved, Some("swh-cancel"), None);
        assert!(replaced(&st).is_empty());
        let mut st = pulled();
        st.rest_after("new".into(), &order("close_long", "limit", ""), Some("swh-cancel"), None);
        assert_eq!(replaced(&st).len(), 1);
    }

    /// An entry placed after `cancel: true` is of the alert's own type: it stands in for the entry pulled, a market
    /// one queued before the open too. Held to the pulled order's type, it stood in for nothing, and a CANCEL
    /// decided meanwhile was marked done while the new entry worked on.
    #[test]
    fn an_entry_after_cancel_first_stands_in_for_an_entry_of_another_type() {
        let mut st = BotState::default();
        st.rest("old".into(), &order("open_long", "market", ""));
        assert!(st.cancelled_by("old", "swh-cancel", None));
        st.rest_after("new".into(), &order("open_long", "limit", ""), Some("swh-cancel"), Some(true));
        let replaced: Vec<_> = st.replaced.iter().map(|r| (r.old.clone(), r.new.clone())).collect();
        assert_eq!(replaced, [("old".to_owned(), "new".to_owned())]);
        // An exit of another type stands in for nothing: a re-size keeps its order's type.
        let mut st = BotState::default();
        st.rest("old".into(), &order("close_long", "market", ""));
        assert!(st.cancelled_by("old", "swh-cancel", None));
        st.rest_after("new".into(), &order("close_long", "limit", ""), Some("swh-cancel"), Some(true));
        assert!(st.replaced.is_empty());
    }

    /// A book made from a strategy file that lists paper ids (an operator's copy of a book) numbered its next order
    /// as one of them: the new limit order was taken for the listed one and never entered the book.
    #[test]
    fn a_book_from_the_file_numbers_its_orders_past_the_ids_it_lists() {
        // Any broker: the server names none (the layers test).
        let broker = strategy_webhook::broker::BrokerId::ALL[0].as_str();
        let snapshot = format!(
            r#"{{"id":"s","token_hash":"0000000000000000000000000000000000000000000000000000000000000000",
                "status":"active","asset_class":"equity","order_type":"limit","allowed_instruments":["AAPL","MSFT"],
                "bots":[{{"id":"b","broker":"{broker}","account_id":"PA1","sizing":{{"fixed_quantity":"10"}},
                  "positions":[{{"instrument":"MSFT","direction":"long","quantity":"3"}}],
                  "working_orders":[{{"id":"paper-1","instrument":"MSFT","direction":"long","intent":"entry",
                    "order_type":"limit","price":"410","quantity":"10","state":"open"}},
                    {{"id":"paper-7","instrument":"MSFT","direction":"long","intent":"exit",
                    "order_type":"limit","price":"450","quantity":"3","state":"open"}}]}}]}}"#
        );
        let s = strategy_webhook::strategy::Strategy::from_json(snapshot.as_bytes()).unwrap();
        let bot = &s.bots[0];
        let mut st = BotState::from_file(bot, StateSource::of(bot));
        assert_eq!(st.positions.len(), 1);
        apply(&mut st, RequestKind::Place, None, &order("open_long", "limit", "")).unwrap();
        let ids: Vec<&str> = st.working_orders.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["paper-1", "paper-7", "paper-8"]);
    }

    /// A crypto close spelled another way than its entry (`BTC/USD` after `BTCUSD`, as the core allows) found no
    /// position: the close failed, and a reversal's new side was held back. Entries under two spellings made two
    /// positions.
    #[test]
    fn a_pair_is_one_position_whatever_its_spelling() {
        let coin = |intent: &str, symbol: &str| -> Order {
            let json = format!(
                r#"{{"asset_class":"crypto","symbol":"{symbol}","intent":"{intent}","quantity":"0.5","order_type":"market",
                    "limit_price":null,"duration":"gtc","legs":[],"client_order_id":"swh-c","reference_price":"60000"}}"#
            );
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
        };
        let mut st = BotState::default();
        apply(&mut st, RequestKind::Place, None, &coin("open_long", "BTCUSD")).unwrap();
        apply(&mut st, RequestKind::Place, None, &coin("open_long", "BTC-USD")).unwrap();
        assert_eq!(st.positions.len(), 1, "one pair, one position: {:?}", st.positions);
        assert_eq!(st.positions[0].quantity, Decimal::from(1));
        apply(&mut st, RequestKind::Place, None, &coin("close_long", "BTC/USD")).unwrap();
        apply(&mut st, RequestKind::Place, None, &coin("close_long", "btc/usd")).unwrap();
        assert!(st.positions.is_empty(), "{:?}", st.positions);
    }

    #[test]
    fn market_orders_fill_at_the_reference_price() {
        let mut st = BotState::default();
        let msg =
            apply(&mut st, RequestKind::Place, None, &order("open_long", "market", r#","reference_price":190.125"#));
        assert_eq!(msg.as_deref(), Ok("filled: buy 10 AAPL @ 190.125"));
        assert_eq!(st.positions[0].avg_price.map(|p| p.to_string()).as_deref(), Some("190.125"));
        assert_eq!((st.positions[0].direction.as_str(), st.positions[0].quantity), ("long", Decimal::from(10)));
        // A second fill averages; no reference price keeps the average it had.
        apply(&mut st, RequestKind::Place, None, &order("open_long", "market", r#","reference_price":191.125"#))
            .unwrap();
        assert_eq!(st.positions[0].avg_price.map(|p| p.to_string()).as_deref(), Some("190.625"));
        apply(&mut st, RequestKind::Place, None, &order("open_long", "market", "")).unwrap();
        assert_eq!(st.positions[0].avg_price.map(|p| p.to_string()).as_deref(), Some("190.625"));
        assert_eq!(st.positions[0].quantity, Decimal::from(30));
        let closed = apply(&mut st, RequestKind::Place, None, &order("close_long", "market", "")).unwrap();
        assert_eq!(closed, "filled: sell 10 AAPL");
        assert_eq!(st.positions[0].quantity, Decimal::from(20));
        let short = apply(&mut st, RequestKind::Place, None, &order("close_short", "market", ""));
        assert_eq!(short, Err("no short position in AAPL to close".into()));
        st.to_core().expect("the state fits the snapshot's types");
    }

    /// A resting spread is recorded as the snapshot reads it: a credit's net negative, so that a MODIFY of its
    /// size alone re-sends it as a credit.
    #[test]
    fn a_resting_credit_spread_is_recorded_with_its_net_negative() {
        let legs = r#"[{"symbol":"SPXW260320C05800000","underlying":"SPX","expiration":"2026-03-20","side":"call",
            "strike":5800,"action":"sell_to_open","ratio":1},{"symbol":"SPXW260320C05850000","underlying":"SPX",
            "expiration":"2026-03-20","side":"call","strike":5850,"action":"buy_to_open","ratio":1}]"#;
        let spread = |effect: &str| -> Order {
            let json = format!(
                r#"{{"asset_class":"option","symbol":"SPX","intent":"open_short","quantity":1,"order_type":"limit",
                    "limit_price":1.20,"price_effect":"{effect}","duration":"day","legs":{legs},"client_order_id":"swh-1"}}"#
            );
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
        };
        let mut st = BotState::default();
        st.rest("p-1".into(), &spread("credit"));
        st.rest("p-2".into(), &spread("debit"));
        let prices: Vec<String> = st.working_orders.iter().map(|o| o.price.unwrap().to_string()).collect();
        assert_eq!(prices, ["-1.20", "1.20"]);
        let (_, working) = st.to_core().unwrap();
        assert_eq!(working[0].price.map(|p| p.to_string()).as_deref(), Some("-1.20"));
        // Re-priced, it stays a credit: stored as the bare amount it read back as a debit, and a size-only
        // MODIFY then sent it as one.
        let mut cheaper = spread("credit");
        cheaper.limit_price = strategy_webhook::decimal::parse("1.10");
        assert!(st.replaced("p-1", Some("p-3".into()), &cheaper));
        assert_eq!(st.working_orders[0].price.map(|p| p.to_string()).as_deref(), Some("-1.10"));
        assert!(st.replaced("p-2", None, &spread("debit")));
        assert_eq!(st.working_orders[1].price.map(|p| p.to_string()).as_deref(), Some("1.20"));
    }

    #[test]
    fn limit_orders_rest_until_changed_or_cancelled() {
        let mut st = BotState::default();
        let msg = apply(&mut st, RequestKind::Place, None, &order("open_short", "limit", "")).unwrap();
        assert_eq!(msg, "working limit order paper-1: sell 10 AAPL @ 190.10");
        let w = &st.working_orders[0];
        assert_eq!((w.direction.as_str(), w.intent.as_str(), w.order_type.as_str()), ("short", "entry", "limit"));
        assert!(st.positions.is_empty(), "a limit order does not fill on its own");
        let mut changed = order("open_short", "limit", "");
        changed.limit_price = strategy_webhook::decimal::parse("191.00");
        apply(&mut st, RequestKind::Replace, Some("paper-1"), &changed).unwrap();
        assert_eq!(st.working_orders[0].price.map(|p| p.to_string()).as_deref(), Some("191.00"));
        assert!(apply(&mut st, RequestKind::Replace, Some("paper-9"), &changed).is_err());
        apply(&mut st, RequestKind::Cancel, Some("paper-1"), &changed).unwrap();
        assert!(st.working_orders.is_empty());
        assert!(apply(&mut st, RequestKind::Cancel, Some("paper-1"), &changed).is_err());
    }

    /// A sync that read the broker's list after it took an order and before its answer came back already holds
    /// the order: the answer must not add it a second time.
    #[test]
    fn an_order_the_state_already_holds_is_not_recorded_twice() {
        let mut st = BotState::default();
        let o = order("close_long", "limit", "");
        st.rest("1001".into(), &o);
        st.working_orders[0].filled = Decimal::from(3);
        st.rest("1001".into(), &o);
        assert_eq!(st.working_orders.len(), 1);
        assert_eq!(st.working_orders[0].filled, Decimal::from(3), "the broker's reading stands");
        st.rest("1002".into(), &o);
        assert_eq!(st.working_orders.len(), 2);
        // A replace answered with a new id the sync already recorded: the old entry goes, the new one stays once.
        assert!(st.replaced("1001", Some("1002".into()), &o));
        let ids: Vec<&str> = st.working_orders.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids, ["1002"]);
        // And the old one is noted as replaced, as on the other path: the broker may list it a while yet.
        let noted: Vec<(&str, &str)> = st.replaced.iter().map(|r| (r.old.as_str(), r.new.as_str())).collect();
        assert_eq!(noted, [("1001", "1002")]);
    }

    #[test]
    fn option_orders_are_not_simulated_but_keep_their_legs_when_tracked() {
        let json = r#"{"asset_class":"option","symbol":"SPX","intent":"open_long","side":"buy","quantity":1,
            "order_type":"limit","limit_price":2.35,"price_effect":"debit","duration":"day",
            "legs":[{"symbol":"SPXW240119C04500000","underlying":"SPX","expiration":"2024-01-19","side":"CALL",
                     "strike":4500,"action":"buy_to_open","ratio":1}],"client_order_id":"swh-2"}"#;
        let o: Order = serde_json::from_str(json).unwrap();
        let mut st = BotState::default();
        assert!(apply(&mut st, RequestKind::Place, None, &o).is_err());
        assert_eq!(st, BotState::default(), "a refused order changes nothing");
        st.rest("1001".into(), &o);
        let (_, working) = st.to_core().expect("an option working order fits the snapshot's types");
        assert_eq!((working[0].instrument.as_str(), working[0].legs.len()), ("SPX", 1));
        assert_eq!(working[0].legs[0].symbol, "SPXW240119C04500000");
    }
}

/// The paper broker as a broker keeps books: one net position per instrument, read as the engine reads it.
#[cfg(test)]
mod books {
    use super::{apply, BotState, StateSource};
    use strategy_webhook::decimal::Decimal;
    use strategy_webhook::model::Order;
    use strategy_webhook::outcome::RequestKind;

    fn order(symbol: &str, intent: &str, order_type: &str, duration: &str, extra: &str) -> Order {
        let limit = if order_type == "limit" { "189" } else { "null" };
        let json = format!(
            r#"{{"asset_class":"equity","symbol":"{symbol}","intent":"{intent}","quantity":10,"order_type":"{order_type}",
                "limit_price":{limit},"duration":"{duration}","legs":[],"client_order_id":"swh-1"{extra}}}"#
        );
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
    }

    /// Brokers keep one net position per instrument (README, "OPEN into the other side of a held position"): a buy of
    /// 10 and a sell-short of 10 decided before either filled leave the account flat. The paper book held both.
    #[test]
    fn a_long_and_a_short_fill_net_to_one_position() {
        let mut st = BotState::default();
        apply(
            &mut st,
            RequestKind::Place,
            None,
            &order("SPY", "open_long", "market", "day", r#","reference_price":512.02"#),
        )
        .unwrap();
        apply(
            &mut st,
            RequestKind::Place,
            None,
            &order("SPY", "open_short", "market", "day", r#","reference_price":512.02"#),
        )
        .unwrap();
        assert!(st.positions.len() <= 1, "the paper book holds both sides of SPY at once: {:?}", st.positions);
    }

    /// A book holding one instrument in several rows (set through the admin API, or seeded from a file: two lots,
    /// both sides) fills as the one net position a broker keeps: a close of the whole takes every row, and a buy
    /// against two short rows nets against both. Against the first row alone, a CLOSE logged as 10 left 3 in
    /// the book, and the book could end long and short at once.
    #[test]
    fn a_position_held_in_several_rows_fills_as_one() {
        let pos = |direction: &str, qty: &str| super::PositionRec {
            instrument: "SPY".into(),
            direction: direction.into(),
            quantity: qty.parse().unwrap(),
            avg_price: None,
            legs: Vec::new(),
        };
        let mut st = BotState { positions: vec![pos("long", "7"), pos("long", "3")], ..Default::default() };
        apply(&mut st, RequestKind::Place, None, &order("SPY", "close_long", "market", "day", "")).unwrap();
        assert!(st.positions.is_empty(), "{:?}", st.positions);
        let mut st = BotState { positions: vec![pos("short", "2"), pos("short", "3")], ..Default::default() };
        apply(
            &mut st,
            RequestKind::Place,
            None,
            &order("SPY", "open_long", "market", "day", r#","reference_price":512.02"#),
        )
        .unwrap();
        let held: Vec<(&str, String)> =
            st.positions.iter().map(|p| (p.direction.as_str(), p.quantity.to_string())).collect();
        assert_eq!(held, [("long", "5".to_owned())], "10 bought against 5 short");
    }

    /// A paper bot whose file lists `NASDAQ:MSFT` (as a TradingView ticker is written): the engine reads that position as
    /// MSFT and answers a CLOSE processed, sized from it; the paper broker found no MSFT position and refused the close.
    #[test]
    fn a_prefixed_position_in_the_file_can_be_closed_on_paper() {
        let broker = strategy_webhook::broker::BrokerId::ALL[0].as_str();
        let token = "1".repeat(64);
        let snapshot = format!(
            r#"{{"id":"s","token_hash":"{token}","status":"active","asset_class":"equity","order_type":"market",
                "allowed_instruments":["MSFT"],"rules":{{"sell":"close_long"}},
                "market":{{"quotes":{{"MSFT":{{"bid":"415.20","ask":"415.30"}}}}}},
                "bots":[{{"id":"b","broker":"{broker}","account_id":"PA1","sizing":{{"fixed_quantity":"10"}},
                  "positions":[{{"instrument":"NASDAQ:MSFT","direction":"long","quantity":"7"}}]}}]}}"#
        );
        let engine = strategy_webhook::Engine::new();
        engine.upsert_json(snapshot.as_bytes()).unwrap();
        let outcome = engine.deliver(
            token.as_bytes(),
            br#"{"ticker":"MSFT","action":"sell"}"#,
            Some("application/json"),
            1_800_000_000_000,
        );
        assert_eq!(outcome.http_status, 200);
        assert_eq!(outcome.response, r#"{"status":"processed"}"#, "the engine closes the file's position");
        let close = &outcome.orders[0].order;
        assert_eq!(close.quantity, Decimal::from(7));
        // The paper bot's book, as the server seeds it from the file.
        let s = strategy_webhook::strategy::Strategy::from_json(snapshot.as_bytes()).unwrap();
        let mut st = BotState::from_file(&s.bots[0], StateSource::of(&s.bots[0]));
        let filled = apply(&mut st, RequestKind::Place, None, close);
        assert!(filled.is_ok(), "the paper broker refused the close the engine answered processed: {filled:?}");
        assert!(st.positions.is_empty(), "{:?}", st.positions);
    }

    /// A fill-or-kill limit order fills at once or is killed: it never rests. The paper broker kept it working.
    #[test]
    fn a_fill_or_kill_limit_never_rests() {
        let mut st = BotState::default();
        apply(&mut st, RequestKind::Place, None, &order("AAPL", "open_long", "limit", "fok", "")).unwrap();
        assert!(st.working_orders.is_empty(), "a FOK limit rests on paper: {:?}", st.working_orders);
    }

    /// A book set through `PUT …/state` with the direction written `Long` (the snapshot reads it as long, so the PUT is
    /// taken and the engine closes it): the paper broker compares `long` as text. A buy then made a second long
    /// position; the CLOSE the engine sized from both (17) was logged "filled: sell 17" while the book still held 7.
    #[test]
    fn a_put_direction_in_capitals_is_the_same_long_position() {
        let mut st: BotState = serde_json::from_str(
            r#"{"positions":[{"instrument":"MSFT","direction":"Long","quantity":"7"}],"working_orders":[]}"#,
        )
        .unwrap();
        st.to_core().expect("the PUT's check takes it");
        apply(
            &mut st,
            RequestKind::Place,
            None,
            &order("MSFT", "open_long", "market", "day", r#","reference_price":415.25"#),
        )
        .unwrap();
        assert_eq!(st.positions.len(), 1, "one MSFT long position: {:?}", st.positions);
    }

    /// "Paper to real": the paper book is not used for the account (its source is the paper broker's), but the strategy
    /// file's `positions`, which docs/server.md makes the paper book's seed, are: until the first read of the account
    /// landed, a CLOSE sold the file's quantity at the broker, where nothing may be held (here the paper CLOSE had
    /// even sold it on paper).
    #[tokio::test]
    async fn switched_to_a_broker_the_files_paper_seed_is_not_sold_there() {
        use strategy_webhook::strategy::Strategy;
        let (dir, store, app) = crate::app::tests::temp_app("paper-switched");
        let mut v: serde_json::Value = serde_json::from_str(&crate::app::tests::own_token_demo()).unwrap();
        v["bots"][0]["positions"] =
            serde_json::json!([{ "instrument": "AAPL", "direction": "long", "quantity": "10" }]);
        let demo = v.to_string();
        let s = Strategy::from_json(demo.as_bytes()).unwrap();
        let (id, bot) = (s.id.to_string(), s.bots[0].id.to_string());
        // On paper the book started from the file, and a CLOSE sold the 10 there: the stored book is flat.
        let mut book = BotState::from_file(
            &s.bots[0],
            StateSource { paper: true, target: Some("paper".into()), ..StateSource::of(&s.bots[0]) },
        );
        book.positions.clear();
        // Restarted with the bot at its broker (token rotated first, as the docs ask: own token here).
        let file = serde_json::json!({ &bot: { "delivery": "http", "base_url": "https://127.0.0.1:9" } });
        let app = app.with_bots(crate::bots::Bots::from_json(file.to_string().as_bytes(), &dir).unwrap());
        app.set_bot_state(&id, &bot, book); // start-up: stored states first
        app.apply_snapshot(demo.as_bytes()).unwrap();
        let out = app.engine.deliver(
            "f".repeat(64).as_bytes(),
            br#"{"ticker":"AAPL","action":"sell"}"#,
            Some("application/json"),
            crate::app::now_ms(),
        );
        let sent: Vec<String> = out
            .orders
            .iter()
            .filter(|o| *o.bot == *bot)
            .map(|o| format!("{} {} {} {}", o.order.side(), o.order.quantity, o.order.symbol, o.request.path))
            .collect();
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        assert!(sent.is_empty(), "sent to the real account before any read of it ({}): {sent:?}", out.response);
    }
}
