//! Methods with `&self`, `&mut self` and `self`, with and without `fallback = Self::…`.
#![deny(warnings)]
use bulkhead::{BulkheadError, bulkhead};

struct Cart {
    items: Vec<u32>,
}

impl Cart {
    #[bulkhead("inventory")]
    fn total(&self) -> Result<u32, BulkheadError> {
        Ok(self.items.iter().sum())
    }

    #[bulkhead("inventory")]
    fn add(&mut self, item: u32) -> Result<usize, BulkheadError> {
        self.items.push(item);
        Ok(self.items.len())
    }

    #[bulkhead("payment", fallback = Self::not_checked_out)]
    fn check_out(self, card: &str) -> String {
        format!("{} items paid with {card}", self.items.len())
    }

    fn not_checked_out(self, card: &str, refused: BulkheadError) -> String {
        format!("{} items not paid with {card}: {refused}", self.items.len())
    }

    #[bulkhead("recommendations", fallback = Self::nothing)]
    fn suggest<'a>(&'a self, prefix: &'a str) -> Vec<&'a str> {
        let _ = prefix;
        Vec::new()
    }

    fn nothing<'a>(&'a self, _prefix: &'a str, _: BulkheadError) -> Vec<&'a str> {
        Vec::new()
    }
}

/// A trait's default method can carry the attribute too.
trait Priced {
    fn cents(&self) -> u32;

    #[bulkhead("payment")]
    fn price(&self) -> Result<String, BulkheadError> {
        Ok(format!("{}.{:02}", self.cents() / 100, self.cents() % 100))
    }
}

impl Priced for Cart {
    fn cents(&self) -> u32 {
        self.items.iter().sum()
    }
}

fn main() {
    let mut cart = Cart { items: vec![1, 2] };
    assert_eq!(cart.add(3).unwrap(), 3);
    assert_eq!(cart.total().unwrap(), 6);
    assert!(cart.suggest("a").is_empty());
    assert_eq!(cart.price().unwrap(), "0.06");
    assert_eq!(cart.check_out("visa"), "3 items paid with visa");
}
