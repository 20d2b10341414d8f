//! An order's terms: market or limit, and how long it stands.

use super::words::words;

words! {
    /// Market or limit.
    pub enum OrderType {
        /// Fill at the market. `MKT` is PickMyTrade's spelling.
        Market = "market" | "mkt",
        /// Fill at the limit price or better. `LMT` is PickMyTrade's spelling.
        Limit = "limit" | "lmt",
    }
}

words! {
    /// Time in force.
    #[derive(Default)]
    pub enum Duration {
        /// Good for the trading day (the default).
        #[default]
        Day = "day",
        /// Good till cancelled.
        Gtc = "gtc",
        /// Fill or kill.
        Fok = "fok",
    }
}
