//! Which way: a position's direction, an order's intent, an option leg's action and
//! side, and whether a net price is paid or received.

use super::words::words;

words! {
    /// Long or short.
    pub enum Direction {
        /// Profits when the price rises.
        Long = "LONG",
        /// Profits when the price falls.
        Short = "SHORT",
    }
}

impl Direction {
    /// The other direction.
    pub fn opposite(self) -> Direction {
        match self {
            Direction::Long => Direction::Short,
            Direction::Short => Direction::Long,
        }
    }
}

words! {
    /// Entry or exit: what a working order is for (a snapshot's `intent`), and which one a
    /// MODIFY alert means (its `target`).
    pub enum OrderIntent {
        /// Opens or adds to a position.
        Entry = "entry",
        /// Reduces or closes a position.
        Exit = "exit",
    }
}

words! {
    /// What an order does to a position.
    pub enum Intent {
        /// Buy to open a long.
        OpenLong = "open_long",
        /// Sell short to open a short.
        OpenShort = "open_short",
        /// Sell to close a long.
        CloseLong = "close_long",
        /// Buy to cover a short.
        CloseShort = "close_short",
    }
}

impl Intent {
    /// The intent for an action and direction.
    pub fn new(open: bool, direction: Direction) -> Intent {
        match (open, direction) {
            (true, Direction::Long) => Intent::OpenLong,
            (true, Direction::Short) => Intent::OpenShort,
            (false, Direction::Long) => Intent::CloseLong,
            (false, Direction::Short) => Intent::CloseShort,
        }
    }

    /// True for buys (open long, close short).
    pub fn is_buy(self) -> bool {
        matches!(self, Intent::OpenLong | Intent::CloseShort)
    }

    /// True for entries.
    pub fn is_open(self) -> bool {
        matches!(self, Intent::OpenLong | Intent::OpenShort)
    }

    /// The position's direction.
    pub fn direction(self) -> Direction {
        match self {
            Intent::OpenLong | Intent::CloseLong => Direction::Long,
            Intent::OpenShort | Intent::CloseShort => Direction::Short,
        }
    }
}

words! {
    /// Call or put. `C` and `P` are read too, in alerts and snapshots alike.
    pub enum OptionSide {
        /// A call option.
        Call = "CALL" | "c",
        /// A put option.
        Put = "PUT" | "p",
    }
}

words! {
    /// An option leg's opening or closing side.
    pub enum LegAction {
        /// buy_to_open
        BuyToOpen = "buy_to_open",
        /// sell_to_open
        SellToOpen = "sell_to_open",
        /// buy_to_close
        BuyToClose = "buy_to_close",
        /// sell_to_close
        SellToClose = "sell_to_close",
    }
}

impl LegAction {
    /// True for the buying actions.
    pub fn is_buy(self) -> bool {
        matches!(self, LegAction::BuyToOpen | LegAction::BuyToClose)
    }

    /// True for the opening actions.
    pub fn is_open(self) -> bool {
        matches!(self, LegAction::BuyToOpen | LegAction::SellToOpen)
    }

    /// The action that unwinds this one (buy_to_open → sell_to_close).
    pub fn closing(self) -> LegAction {
        match self {
            LegAction::BuyToOpen => LegAction::SellToClose,
            LegAction::SellToOpen => LegAction::BuyToClose,
            LegAction::BuyToClose => LegAction::SellToOpen,
            LegAction::SellToClose => LegAction::BuyToOpen,
        }
    }
}

words! {
    /// Whether the trader pays (debit) or receives (credit) the net price.
    pub enum PriceEffect {
        /// You pay.
        Debit = "debit",
        /// You receive.
        Credit = "credit",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closing_actions() {
        assert_eq!(LegAction::BuyToOpen.closing(), LegAction::SellToClose);
        assert_eq!(LegAction::SellToOpen.closing(), LegAction::BuyToClose);
    }
}
