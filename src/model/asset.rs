//! What a strategy trades.

use super::words::words;

words! {
    /// What a strategy trades.
    pub enum AssetClass {
        /// Stocks and ETFs.
        Equity = "equity",
        /// Listed options (single and multi-leg).
        Option = "option",
        /// Spot crypto pairs.
        Crypto = "crypto",
    }
}
