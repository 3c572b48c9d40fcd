//! A listener may subscribe listeners and drop subscriptions, its own included, from
//! inside `on_event`: nothing waits for the delivery under way, and the change is for later
//! events. Each test makes its calls on a thread of its own and fails, rather than hangs,
//! when that thread does not come back. Each uses bulkheads of its own names, and its
//! listeners count only those.

mod support;

use std::sync::{Arc, Mutex};

use bulkhead_core::SemaphoreBulkhead;
use bulkhead_core::events::{self, Event, EventKind, Subscription};
use support::{returns, semaphore};

/// `permitted`, `finished`…: what a listener heard of the bulkhead `name`.
type Heard = Arc<Mutex<Vec<&'static str>>>;

fn hearing(name: &'static str, heard: &Heard) -> impl Fn(&Event<'_>) + Send + Sync + 'static {
    let heard = Arc::clone(heard);
    move |event: &Event<'_>| {
        if event.bulkhead == name {
            heard.lock().unwrap().push(match event.kind {
                EventKind::Permitted => "permitted",
                EventKind::Finished { .. } => "finished",
                _ => "other",
            });
        }
    }
}

fn one_call(name: &'static str) {
    SemaphoreBulkhead::new(name, &semaphore(4, 0))
        .call(|| ())
        .unwrap();
}

#[test]
fn a_listener_subscribes_another_from_inside_on_event() {
    const NAME: &str = "reentrant-subscribe";
    let inner_heard = Heard::default();
    let made: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let (inner, keep) = (inner_heard.clone(), Arc::clone(&made));
    let outer = events::subscribe(move |event: &Event<'_>| {
        let mut made = keep.lock().unwrap();
        if event.bulkhead == NAME && made.is_none() {
            *made = Some(events::subscribe(hearing(NAME, &inner)));
        }
    });
    returns("a listener subscribing", || one_call(NAME));
    // Subscribed while the call's `Permitted` was delivered: it hears from the next event.
    assert_eq!(*inner_heard.lock().unwrap(), ["finished"]);
    returns("the next call", || one_call(NAME));
    assert_eq!(
        *inner_heard.lock().unwrap(),
        ["finished", "permitted", "finished"]
    );
    drop(outer);
    drop(made.lock().unwrap().take());
    returns("a call after both are gone", || one_call(NAME));
    assert_eq!(inner_heard.lock().unwrap().len(), 3);
}

#[test]
fn a_listener_drops_its_own_subscription_from_inside_on_event() {
    const NAME: &str = "reentrant-own-drop";
    let heard = Heard::default();
    let own: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let (listen, slot) = (hearing(NAME, &heard), Arc::clone(&own));
    // Held while subscribing, so the first event cannot miss the subscription.
    let mut own_slot = own.lock().unwrap();
    *own_slot = Some(events::subscribe(move |event: &Event<'_>| {
        listen(event);
        if event.bulkhead == NAME {
            drop(slot.lock().unwrap().take()); // once: it hears nothing after this
        }
    }));
    drop(own_slot);
    returns("a listener dropping its own subscription", || {
        one_call(NAME)
    });
    assert_eq!(*heard.lock().unwrap(), ["permitted"]);
    returns("the next call", || one_call(NAME));
    assert_eq!(*heard.lock().unwrap(), ["permitted"]);
}

#[test]
fn a_listener_drops_a_later_listener_which_misses_the_event_being_delivered() {
    const NAME: &str = "reentrant-other-drop";
    let later_heard = Heard::default();
    let later: Arc<Mutex<Option<Subscription>>> = Arc::default();
    let slot = Arc::clone(&later);
    let first = events::subscribe(move |event: &Event<'_>| {
        if event.bulkhead == NAME {
            drop(slot.lock().unwrap().take());
        }
    });
    *later.lock().unwrap() = Some(events::subscribe(hearing(NAME, &later_heard)));
    returns("a listener dropping another's subscription", || {
        one_call(NAME)
    });
    assert!(later_heard.lock().unwrap().is_empty());
    drop(first);
}

#[test]
fn a_subscription_made_and_dropped_inside_one_delivery_never_listens() {
    const NAME: &str = "reentrant-made-and-dropped";
    let heard = Heard::default();
    let inner = heard.clone();
    let outer = events::subscribe(move |event: &Event<'_>| {
        if event.bulkhead == NAME {
            drop(events::subscribe(hearing(NAME, &inner)));
        }
    });
    returns("subscribing and dropping inside a listener", || {
        one_call(NAME);
        one_call(NAME);
    });
    assert!(heard.lock().unwrap().is_empty());
    drop(outer);
}
