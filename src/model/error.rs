//! Why an order could not be built or formatted.
//!
//! Two families, told apart by [`OrderError::is_rejection`]: the order would be wrong for
//! this bot (the delivery is answered 200 rejected with the reason), or the core cannot
//! fill it in from what it was given (answered 500 naming the cause, so the sender's retry
//! is not swallowed). The HTTP status itself is chosen in one place,
//! `crate::outcome::ErrorKind`.

use super::asset::AssetClass;
use super::date::Date;
use super::side::Direction;
use super::terms::Duration;
use crate::decimal::Decimal;

/// Why an order could not be built or formatted. Messages are sentences a trader reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    // ----- rejections: the order would be wrong for this bot -----
    /// The bot's sizing comes to nothing once rounded to what can be traded.
    #[error("{described} comes to less than {unit}")]
    SizeTooSmall {
        /// Where the size came from (the sizing and the price it was divided by).
        described: String,
        /// The smallest tradable size, in words.
        unit: String,
    },
    /// The bot's amount divided by the price comes to more units than a number here holds (a price like 1e-27): the
    /// sender's number, refused as any size past what an order can hold is. As a 500, it failed every bot's order,
    /// a fixed quantity's too, and each automatic resend failed the same way.
    #[error("{described} comes to more units than any order can hold; nothing is sent")]
    SizeBeyondAny {
        /// Where the size came from (the sizing and the price it was divided by).
        described: String,
    },
    /// The sender's prices come to more than a number here holds (legs priced near 10^28 summed): refused as the
    /// sender's bad number, never a 500 that fails every bot's order.
    #[error("{described} come to more than any price an order can hold; nothing is sent")]
    PriceBeyondAny {
        /// Which prices.
        described: String,
    },
    /// An amount of money cannot size this option structure: its loss has no bound (more calls sold than bought),
    /// or at its price it could not lose. The bot's sizing is what is wrong, so other bots' orders still go.
    #[error("{reason}")]
    AmountCannotSize {
        /// Why, naming the structure.
        reason: String,
    },
    /// A limit price was needed, and the strategy takes it from the alert, which has none.
    #[error("the strategy's Limit Target is Alert Price and the alert has no price")]
    NoAlertPrice,
    /// The CLOSE of an option reversal onto other contracts, as a limit order, with no quote to price it: the
    /// alert's price is the new position's, so it cannot price the close.
    #[error(
        "the alert's price ({price}) is the new position's, so it cannot price the close of the {instrument} \
         position it reverses (other contracts); give the strategy a Limit Target other than Alert Price and the \
         closing legs' quotes, or send the reversal as a market order"
    )]
    ReversalCloseUnpriced {
        /// The underlying.
        instrument: String,
        /// The alert's price.
        price: Decimal,
    },
    /// MODIFY with a notional, and no price to size it from.
    #[error("MODIFY with a notional needs a price to size from")]
    NotionalWithoutPrice,
    /// MODIFY with a notional, and a price that cannot size it.
    #[error("MODIFY with a notional needs a price above zero to size from (got {price})")]
    NotionalPriceNotPositive {
        /// The price given.
        price: Decimal,
    },
    /// MODIFY could mean more than one of the bot's working orders on that side.
    #[error(
        "MODIFY {direction} {instrument} is ambiguous: {} working orders — {}; {hint}",
        orders.len(),
        orders.join(", ")
    )]
    AmbiguousModify {
        /// The side.
        direction: Direction,
        /// The instrument.
        instrument: String,
        /// Each candidate in words: side, type, price, entry or exit, id.
        orders: Vec<String>,
        /// How to say which one.
        hint: &'static str,
    },
    /// MODIFY would make an exit larger than the position it closes: filled past the
    /// position, it would open the other side, and MODIFY never opens a new trade.
    #[error(
        "MODIFY cannot make the {direction} {instrument} exit {quantity}: the bot holds {held}{}, and exits larger \
         than the position would open a {} position",
        if covered.is_zero() { String::new() } else { format!(", {covered} of it under its other working exits") },
        direction.opposite().as_str()
    )]
    ExitPastPosition {
        /// The side of the position.
        direction: Direction,
        /// The instrument.
        instrument: String,
        /// The size asked for.
        quantity: Decimal,
        /// The bot's position in that direction.
        held: Decimal,
        /// What of it the bot's other working exits already cover.
        covered: Decimal,
    },
    /// An OPEN into the side opposite a position the bot holds in the instrument. The brokers keep one net
    /// position per instrument, so the order would reduce or close the held position rather than open this side,
    /// while the answer said it opened it.
    #[error(
        "it holds {held} {instrument} {}: an OPEN {direction} would net against that position at the broker, not \
         open a {direction} one; send CLOSE {} first, or the reversal as a transition \
         (prevMarketPosition and marketPosition)",
        direction.opposite(),
        direction.opposite()
    )]
    HoldsOtherSide {
        /// The side the OPEN asked for.
        direction: Direction,
        /// The instrument.
        instrument: String,
        /// The bot's position on the other side.
        held: Decimal,
    },
    /// An option OPEN one of whose legs opens a contract the bot holds the other way (held bought and now sold to
    /// open, or held sold and now bought to open). The brokers keep one net position per contract, so the leg would
    /// close the held contracts rather than open new ones, while the answer said a position was opened.
    #[error(
        "it holds {contract} {held} in its {position} position: an OPEN {direction} would {action} it, which nets \
         against the held contract at the broker rather than opening one; close that position first"
    )]
    HoldsContractOtherWay {
        /// The side the OPEN asked for.
        direction: Direction,
        /// The contract, as an unpadded OCC symbol.
        contract: String,
        /// How it is held: `bought` or `sold`.
        held: &'static str,
        /// The held position, in words (`LONG SPX`).
        position: String,
        /// The OPEN's action on it (`sell_to_open`).
        action: &'static str,
    },
    /// An option OPEN beside a held position leg that is not an OCC symbol: whether the OPEN trades that contract the
    /// other way (netting against it at the broker) cannot be told, so it is refused rather than guessed.
    #[error(
        "its {position} position lists leg {leg:?}, which is not an OCC option symbol, so whether this OPEN trades \
         a held contract the other way cannot be told; list the position's legs by their OCC symbols"
    )]
    HeldLegUnreadable {
        /// The held position, in words (`LONG SPX`).
        position: String,
        /// The leg's symbol as listed (cut short when long).
        leg: String,
    },
    /// MODIFY with a price for a working market order, which has no limit price to change.
    #[error(
        "MODIFY cannot set the price {price} on working order {order_id}: it is a market order, which has no \
         limit price; send CANCEL and a new limit entry instead"
    )]
    MarketOrderPrice {
        /// The working order's id.
        order_id: String,
        /// The price the alert asked for.
        price: Decimal,
    },
    /// MODIFY naming an order type or time in force other than the working order's, which a change of price and
    /// size keeps.
    #[error(
        "MODIFY changes only the price and quantity of working order {order_id}: it is a {has} order and the alert \
         asks for {term} {asked}; send CANCEL and a new order to change its {term}"
    )]
    ModifyKeepsTerms {
        /// The working order's id.
        order_id: String,
        /// `order type` or `time in force`.
        term: &'static str,
        /// What the alert asked for.
        asked: &'static str,
        /// What the working order has.
        has: &'static str,
    },
    /// MODIFY of a working order whose time in force is the broker's own (listed as `other`): every order this
    /// library sends is day, gtc or fok, so re-sent it would go out as another.
    #[error(
        "working order {order_id} has a time in force this library does not send (the broker's own); a MODIFY \
         would re-send it as another: change it at the broker, or send CANCEL and a new order"
    )]
    ModifyBrokerTimeInForce {
        /// The working order's id.
        order_id: String,
    },
    /// MODIFY of a working order of a kind this library does not place (listed as `other`: a stop, a stop-limit, a
    /// bracket): a change re-sends the order in its own terms, and this library can state no such order, so it would
    /// go out as another kind (a stop-limit as a plain limit sell, filled at once).
    #[error(
        "working order {order_id} is of a kind this library does not place (a stop, a stop-limit, a bracket…), so a \
         MODIFY cannot restate it: change it at the broker, or send CANCEL and a new order"
    )]
    ModifyOrderKind {
        /// The working order's id.
        order_id: String,
    },
    /// MODIFY of a working order whose size is not known (listed with `"size_known": false`): a trader's order
    /// sized by an amount of money, or one whose broker states no count. A change states the order's size,
    /// and sized from its listed 0 it was re-sent as an order of nothing (or refused at the broker).
    #[error(
        "working order {order_id} {}: a MODIFY would have to re-send it at a size that is not known; change it at \
         the broker",
        size_not_known(*notional)
    )]
    ModifySizeNotKnown {
        /// The working order's id.
        order_id: String,
        /// The amount of money it was sized by, where that is why its size is not known.
        notional: Option<Decimal>,
    },
    /// The broker cannot take the order as it stands (quantity, price, legs, shorts, changes).
    #[error("{reason}")]
    BrokerRefuses {
        /// The broker's display name.
        broker: &'static str,
        /// What it cannot take, naming the broker.
        reason: String,
    },
    /// The broker lacks this time in force for this kind of order.
    #[error("{broker} does not accept time in force {} for {what} orders (it takes {accepted})", duration.as_str().to_ascii_uppercase())]
    TimeInForce {
        /// The broker's display name.
        broker: &'static str,
        /// The kind of order (`option`, `crypto`…).
        what: &'static str,
        /// The time in force asked for.
        duration: Duration,
        /// What the broker takes instead.
        accepted: &'static str,
    },

    // ----- causes: the core cannot fill the order in -----
    /// Arithmetic that would overflow (prices or sizes near 7.9 × 10²⁸).
    #[error("a price or size in this order is too large to compute with")]
    Overflow,
    /// The market data has no quote (or not the side needed) to set a limit price from.
    #[error("no {what} quote for {instrument} in the market data, so the limit price cannot be set")]
    MissingQuote {
        /// The instrument.
        instrument: String,
        /// `bid/ask`, `bid`, `ask` or `last`.
        what: &'static str,
    },
    /// The quote's bid is above its ask.
    #[error("the quote for {instrument} is crossed (bid {bid} above ask {ask}), so the limit price cannot be set")]
    CrossedQuote {
        /// The instrument.
        instrument: String,
        /// Its bid.
        bid: Decimal,
        /// Its ask.
        ask: Decimal,
    },
    /// The quote has a side at zero or below (a bid of 0, common far from the money): it has no mid, and halving
    /// its one price priced a sell at half the market.
    #[error(
        "the quote for {instrument} is one-sided (bid {bid}, ask {ask}), so it has no mid and the limit price cannot \
         be set"
    )]
    OneSidedQuote {
        /// The instrument.
        instrument: String,
        /// Its bid.
        bid: Decimal,
        /// Its ask.
        ask: Decimal,
    },
    /// The Limit Target computed from the quote is zero or below.
    #[error("the quote for {instrument} gives a limit price of {price}, which is not above zero")]
    QuotedPriceNotPositive {
        /// The instrument.
        instrument: String,
        /// The computed price.
        price: Decimal,
    },
    /// A limit price of zero or below.
    #[error("the limit price {price} for {instrument} is not above zero")]
    LimitNotPositive {
        /// The instrument.
        instrument: String,
        /// The price.
        price: Decimal,
    },
    /// A quote with neither bid/ask nor last to size from.
    #[error("the quote for {instrument} has no bid/ask or last price to size from")]
    QuoteWithoutPrice {
        /// The instrument.
        instrument: String,
    },
    /// No price at all to size an amount-based entry from.
    #[error("no price to size {instrument} from: the alert has no price and the market data has no quote")]
    NoSizingPrice {
        /// The instrument.
        instrument: String,
    },
    /// The price an amount is divided by is zero or below.
    #[error("the price for sizing {what} is not above zero")]
    SizingPriceNotPositive {
        /// What was being sized.
        what: String,
    },
    /// `percent_of_equity` sizing without the bot's equity.
    #[error("bot {bot} has percent_of_equity sizing but no equity")]
    NoEquity {
        /// The bot.
        bot: String,
    },
    /// An instrument that reads as no crypto pair.
    #[error("{instrument} is not a crypto pair this service knows (send BTCUSD or BTC/USD)")]
    NotACryptoPair {
        /// The instrument.
        instrument: String,
    },
    /// The market data has no option chain for the underlying.
    #[error("no option chain for {underlying} in the market data")]
    NoOptionChain {
        /// The underlying.
        underlying: String,
    },
    /// No listed expiration within the strategy's days to expiration.
    #[error("no expiration of {underlying} between {min_days} and {max_days} days from {today} in the option chain")]
    NoExpiration {
        /// The underlying.
        underlying: String,
        /// Fewest days allowed.
        min_days: u32,
        /// Most days allowed.
        max_days: u32,
        /// Today in New York.
        today: Date,
    },
    /// The chain's underlying price cannot place at-the-money.
    #[error(
        "the {underlying} option chain's underlying price {price} is not above zero, so at-the-money cannot be found"
    )]
    ChainPriceNotPositive {
        /// The underlying.
        underlying: String,
        /// The chain's price.
        price: Decimal,
    },
    /// The chain lists no strikes.
    #[error("the {underlying} option chain lists no strikes")]
    NoStrikes {
        /// The underlying.
        underlying: String,
    },
    /// No strike that many strikes away from at-the-money.
    #[error(
        "no strike {steps} {} at-the-money {atm} in the {underlying} chain (it lists {low} to {high})",
        if *above { "above" } else { "below" }
    )]
    NoStrike {
        /// The underlying.
        underlying: String,
        /// Strikes away from at-the-money.
        steps: u32,
        /// Above (higher strikes) or below.
        above: bool,
        /// The at-the-money strike.
        atm: Decimal,
        /// Lowest listed strike.
        low: Decimal,
        /// Highest listed strike.
        high: Decimal,
    },
    /// The bot's broker does not trade this asset class.
    #[error("{broker} does not offer {asset_class} trading, so this bot cannot take the order")]
    BrokerDoesNotOffer {
        /// The broker's display name.
        broker: &'static str,
        /// The asset class.
        asset_class: AssetClass,
    },
    /// The bot's broker offers equity options only, and the order is on an index.
    #[error("{broker} offers no index options, so this bot cannot trade {underlying} options")]
    NoIndexOptions {
        /// The broker's display name.
        broker: &'static str,
        /// The index (`SPX`).
        underlying: String,
    },
    /// The bot has no account id for the request path.
    #[error("the bot has no {broker} account id, so the order has nowhere to go")]
    NoAccountId {
        /// The broker's display name.
        broker: &'static str,
    },
    /// A change or cancel without the working order's id.
    #[error("the working order has no {broker} order id to change or cancel")]
    NoOrderId {
        /// The broker's display name.
        broker: &'static str,
    },
    /// A cause found in a working order, named by its id.
    #[error("{source} (working order {order_id})")]
    InWorkingOrder {
        /// The broker's id of the working order.
        order_id: String,
        /// What is wrong with it.
        source: Box<OrderError>,
    },
    /// Another cause in the snapshot, the alert's option legs, or the order itself, said in words.
    #[error("{0}")]
    Unfillable(String),
    /// A position whose every contract stopped trading: nothing the bot can send (the broker settles them).
    #[error(
        "{position}'s contracts no longer trade ({contracts}): they stopped at the close in New York (16:00, 13:00 on \
         a half day) of their last trading day, and the broker settles them"
    )]
    ContractsExpired {
        /// The position, in words.
        position: String,
        /// Its contracts, OCC symbols.
        contracts: String,
    },
    /// A position whose close no cut into orders can carry safely (a group of sold contracts and their covers larger
    /// than an order, or more legs than the service cuts): it is closed at the broker. A rejection for this bot
    /// alone: failing the delivery (500 at every retry), it kept every other bot's close from going.
    #[error("{position}: {why}")]
    Uncuttable {
        /// The position, in words.
        position: String,
        /// Why no cut fits, and what to do.
        why: String,
    },
    /// A limit close priced by the alert for a structure some of whose contracts no longer trade: the price is the
    /// whole structure's, not that of the legs left. A rejection for this bot alone.
    #[error(
        "the alert's price {price} prices the whole {position}, but {contracts} no longer trade and are left out \
         of the close; close it with a market order, or without a price so what is left is priced from its quotes"
    )]
    PricedWithExpired {
        /// The position, in words.
        position: String,
        /// The contracts left out, OCC symbols.
        contracts: String,
        /// The alert's price.
        price: Decimal,
    },
    /// A MODIFY growing an option exit beside another working exit whose contracts cannot be told (listed with no
    /// legs, or a leg not in OCC symbols): grown, the exit could sell past the position. A rejection for this bot
    /// alone: failing the delivery (500 at every retry), it kept every other bot's change from going.
    #[error(
        "working exit {other} {why}, so which contracts it sells cannot be told and the exit made larger could sell \
         past the position; {fix} (working order {order_id})"
    )]
    OtherExitUnreadable {
        /// The broker's id of the exit the MODIFY grows.
        order_id: String,
        /// The broker's id of the exit that cannot be read.
        other: String,
        /// How it is listed, in words.
        why: String,
        /// What to list instead.
        fix: &'static str,
    },
    /// A MODIFY growing an exit beside another working exit of the position whose size is not known (a trader's
    /// sell sized by an amount of money): counted as covering nothing, the exit grew until both could sell past
    /// the position. A rejection for this bot alone, as [`OrderError::OtherExitUnreadable`] is.
    #[error(
        "working exit {other} {}, so how much of the position it sells is not known and the exit made larger could \
         sell past the position; cancel or change it at the broker first (working order {order_id})",
        size_not_known(*notional)
    )]
    OtherExitSizeNotKnown {
        /// The broker's id of the exit the MODIFY grows.
        order_id: String,
        /// The broker's id of the exit whose size is not known.
        other: String,
        /// The amount of money it was sized by, where that is why its size is not known.
        notional: Option<Decimal>,
    },
}

/// Why a working order's size is not known, in words.
fn size_not_known(notional: Option<Decimal>) -> String {
    match notional {
        Some(n) => format!(
            "is sized by an amount of money ({}), not by a count: how many shares or coins it trades is not known \
             until it fills",
            n.normalize()
        ),
        None => "is listed with no count of shares, coins or contracts: its size is not known".into(),
    }
}

impl OrderError {
    /// True when the order would be wrong for this bot (answered 200 rejected); false when
    /// the core could not fill it in (answered 500).
    pub fn is_rejection(&self) -> bool {
        match self {
            OrderError::SizeTooSmall { .. }
            | OrderError::SizeBeyondAny { .. }
            | OrderError::PriceBeyondAny { .. }
            | OrderError::AmountCannotSize { .. }
            | OrderError::AmbiguousModify { .. }
            | OrderError::ExitPastPosition { .. }
            | OrderError::HoldsOtherSide { .. }
            | OrderError::HoldsContractOtherWay { .. }
            | OrderError::HeldLegUnreadable { .. }
            | OrderError::MarketOrderPrice { .. }
            | OrderError::ModifyKeepsTerms { .. }
            | OrderError::ModifyBrokerTimeInForce { .. }
            | OrderError::ModifyOrderKind { .. }
            // The sender's price, or a credit asked for options it only buys: a bad number, never a 500 that
            // invites resends of the same alert.
            | OrderError::LimitNotPositive { .. }
            | OrderError::NoAlertPrice
            | OrderError::ReversalCloseUnpriced { .. }
            | OrderError::NotionalWithoutPrice
            | OrderError::NotionalPriceNotPositive { .. }
            | OrderError::BrokerRefuses { .. }
            | OrderError::TimeInForce { .. }
            | OrderError::ContractsExpired { .. }
            | OrderError::Uncuttable { .. }
            | OrderError::PricedWithExpired { .. }
            | OrderError::ModifySizeNotKnown { .. }
            | OrderError::OtherExitSizeNotKnown { .. }
            | OrderError::OtherExitUnreadable { .. } => true,
            OrderError::InWorkingOrder { source, .. } => source.is_rejection(),
            _ => false,
        }
    }

    /// Names the working order a cause was found in; rejections read well without it.
    pub fn in_working_order(self, order_id: &str) -> OrderError {
        if self.is_rejection() {
            self
        } else {
            OrderError::InWorkingOrder { order_id: order_id.to_string(), source: Box::new(self) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_messages() {
        let e = OrderError::NoStrike {
            underlying: "SPX".into(),
            steps: 3,
            above: false,
            atm: Decimal::from(4500),
            low: Decimal::from(4495),
            high: Decimal::from(4510),
        };
        assert_eq!(e.to_string(), "no strike 3 below at-the-money 4500 in the SPX chain (it lists 4495 to 4510)");
        assert!(!e.is_rejection());
        let named = e.in_working_order("ord-1");
        assert!(named.to_string().ends_with("(working order ord-1)"));
        let t = OrderError::TimeInForce { broker: "B", what: "crypto", duration: Duration::Fok, accepted: "GTC" };
        assert_eq!(t.to_string(), "B does not accept time in force FOK for crypto orders (it takes GTC)");
        assert!(t.is_rejection());
        assert_eq!(t.clone().in_working_order("x"), t, "a rejection reads well without the id");
    }
}
