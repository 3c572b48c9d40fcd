//! Helpers shared by the facade's tests (`mod support;` in each test file that uses them).

use std::sync::{Condvar, Mutex};

/// Blocks its callers until opened.
#[derive(Default)]
pub struct Latch(Mutex<bool>, Condvar);

impl Latch {
    /// Waits until [`open`](Self::open) has been called (at once if it was).
    pub fn wait(&self) {
        let mut open = self.0.lock().unwrap();
        while !*open {
            open = self.1.wait(open).unwrap();
        }
    }

    /// Lets every waiter, present and future, through.
    pub fn open(&self) {
        *self.0.lock().unwrap() = true;
        self.1.notify_all();
    }
}
