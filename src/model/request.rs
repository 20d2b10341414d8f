//! What a broker request does.

use super::words::words;

words! {
    /// What a broker request does: the Outcome's `kind`, and what a broker's answer is read as.
    pub enum RequestKind {
        /// A new order.
        Place = "place",
        /// A change to a working order.
        Replace = "replace",
        /// A cancellation of a working order.
        Cancel = "cancel",
    }
}
