//! A deploy listener may own subscriptions, drop its own, and subscribe others, from inside
//! its call or from its destructor: nothing waits for a lock the dropping thread holds.
//! Each test runs on a thread of its own and fails, rather than hangs, when that thread
//! does not come back.

mod support;

use std::sync::{Arc, Mutex};

use bulkhead_config_types::Config;
use bulkhead_core::{DeployOutcome, DeploySubscription, Registry};
use support::returns;

/// A listener that counts the deploys it hears.
fn counting(heard: &Arc<Mutex<u32>>) -> impl Fn(&DeployOutcome<'_>) + Send + Sync + 'static {
    let heard = Arc::clone(heard);
    move |_: &DeployOutcome<'_>| *heard.lock().unwrap() += 1
}

#[test]
fn dropping_a_listener_that_owns_another_subscription_returns_and_ends_both() {
    let registry = Arc::new(Registry::new());
    let heard = Arc::new(Mutex::new(0));
    let inner = registry.subscribe_deploys(counting(&heard));
    // The outer listener owns the inner subscription: dropping the outer drops the inner.
    let outer = registry.subscribe_deploys(move |_: &DeployOutcome<'_>| {
        let _owned: &DeploySubscription = &inner;
    });
    registry.reload(&Config::default()).unwrap();
    assert_eq!(*heard.lock().unwrap(), 1);

    returns("dropping the outer subscription", move || drop(outer));

    registry.reload(&Config::default()).unwrap();
    assert_eq!(
        *heard.lock().unwrap(),
        1,
        "the inner listener was dropped with the outer one"
    );
}

#[test]
fn a_listener_drops_its_own_subscription_and_hears_no_later_deploy() {
    let registry = Arc::new(Registry::new());
    let heard = Arc::new(Mutex::new(0));
    let own: Arc<Mutex<Option<DeploySubscription>>> = Arc::default();
    let slot = Arc::clone(&own);
    let count = counting(&heard);
    *own.lock().unwrap() = Some(
        registry.subscribe_deploys(move |outcome: &DeployOutcome<'_>| {
            count(outcome);
            // Its own subscription, dropped from inside its call; the closure holding `slot`
            // (and so, before this, a cycle) is freed by it.
            drop(slot.lock().unwrap().take());
        }),
    );
    drop(own);

    let deploying = Arc::clone(&registry);
    returns("a deploy whose listener drops itself", move || {
        deploying.reload(&Config::default()).unwrap();
        deploying.reload(&Config::default()).unwrap();
    });
    assert_eq!(*heard.lock().unwrap(), 1);
}

#[test]
fn a_listener_subscribes_another_which_hears_the_next_deploy() {
    let registry = Arc::new(Registry::new());
    let heard = Arc::new(Mutex::new(0));
    let made: Arc<Mutex<Vec<DeploySubscription>>> = Arc::default();
    let (into, weak_registry) = (Arc::clone(&made), Arc::downgrade(&registry));
    let later = Arc::clone(&heard);
    let _outer = registry.subscribe_deploys(move |_: &DeployOutcome<'_>| {
        let mut made = into.lock().unwrap();
        if made.is_empty()
            && let Some(registry) = weak_registry.upgrade()
        {
            made.push(registry.subscribe_deploys(counting(&later)));
        }
    });

    let deploying = Arc::clone(&registry);
    returns("a deploy whose listener subscribes another", move || {
        deploying.reload(&Config::default()).unwrap();
        deploying.reload(&Config::default()).unwrap();
    });
    assert_eq!(*heard.lock().unwrap(), 1, "heard the second deploy only");
    drop(made);
}
