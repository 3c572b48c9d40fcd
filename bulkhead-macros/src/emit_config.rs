//! A resolved [`BulkheadConfig`] written back as Rust: the expression the expansion
//! compiles into the binary, so the run time builds the declared config without parsing.
//!
//! Every struct is taken apart with an exhaustive pattern, so a field added to a config
//! type fails to compile here until it is emitted too (a declaration can never silently
//! lose a setting). The enums are `#[non_exhaustive]`: a variant this crate does not know
//! becomes a `compile_error!` naming it ([`unknown`]), never a wrong value. The expression
//! names only the facade's `__private::config_types` (`crate_path.rs`).

use bulkhead_config::{
    AdaptiveAlgorithm, AdaptiveConfig, BulkheadConfig, ClusterLimitConfig, CodelConfig, Duration,
    Expected, Limits, OnFull, OnStoreError, Partitions, PerKeyConfig, QueueOrder, RateLimitConfig,
    RateLimitScope, RateLimitStore, SaturationThresholds, SemaphoreConfig, ThreadPoolConfig,
};
use proc_macro2::TokenStream;
use quote::quote;

/// The expression that builds `config`.
pub(crate) fn bulkhead_config(config: &BulkheadConfig) -> TokenStream {
    let c = types();
    let BulkheadConfig {
        limits,
        rate_limit,
        timeout,
        saturation,
        expected,
        adaptive,
        partitions,
        per_key,
        cluster,
    } = config;
    let limits = self::limits(limits);
    let adaptive = option(adaptive.as_ref(), self::adaptive);
    let rate_limit = option(rate_limit.as_ref(), self::rate_limit);
    let timeout = option(timeout.as_ref(), |d| duration(*d));
    let saturation = self::saturation(saturation);
    let expected = option(expected.as_ref(), self::expected);
    let partitions = self::partitions(partitions);
    let per_key = option(per_key.as_ref(), self::per_key);
    let cluster = option(cluster.as_ref(), self::cluster);
    quote! {
        #c::BulkheadConfig {
            limits: #limits,
            rate_limit: #rate_limit,
            timeout: #timeout,
            saturation: #saturation,
            expected: #expected,
            adaptive: #adaptive,
            partitions: #partitions,
            per_key: #per_key,
            cluster: #cluster,
        }
    }
}

fn cluster(cluster: &ClusterLimitConfig) -> TokenStream {
    let c = types();
    let ClusterLimitConfig { store, lease_ttl } = cluster;
    let (store, lease_ttl) = (self::store(store), duration(*lease_ttl));
    quote! {
        #c::ClusterLimitConfig {
            store: #store,
            lease_ttl: #lease_ttl,
        }
    }
}

fn partitions(partitions: &Partitions) -> TokenStream {
    let c = types();
    let Partitions { shares } = partitions;
    let (names, shares): (Vec<&String>, Vec<TokenStream>) = shares
        .iter()
        .map(|(name, share)| (name, float(*share)))
        .unzip();
    quote! {
        #c::Partitions {
            shares: ::std::collections::BTreeMap::from([
                #((::std::string::String::from(#names), #shares)),*
            ]),
        }
    }
}

fn per_key(per_key: &PerKeyConfig) -> TokenStream {
    let c = types();
    let PerKeyConfig {
        max_concurrent_calls,
        max_keys,
    } = per_key;
    quote! {
        #c::PerKeyConfig {
            max_concurrent_calls: #max_concurrent_calls,
            max_keys: #max_keys,
        }
    }
}

/// The expression for a variant of a config enum this crate does not know: a compile error.
/// The bulkhead crates pin each other to one release, so no declaration gets here.
pub(crate) fn unknown(variant: &impl std::fmt::Debug) -> TokenStream {
    let message = format!(
        "bulkhead-macros cannot write `{variant:?}` as Rust: use the bulkhead-macros of the \
         same release as bulkhead"
    );
    quote!(::core::compile_error!(#message))
}

fn types() -> TokenStream {
    let p = crate::crate_path::private(proc_macro2::Span::call_site());
    quote!(#p::config_types)
}

fn limits(limits: &Limits) -> TokenStream {
    let c = types();
    match limits {
        Limits::Semaphore(semaphore) => {
            let SemaphoreConfig {
                max_concurrent_calls,
                max_wait,
                fair,
            } = semaphore;
            let max_wait = duration(*max_wait);
            quote! {
                #c::Limits::Semaphore(#c::SemaphoreConfig {
                    max_concurrent_calls: #max_concurrent_calls,
                    max_wait: #max_wait,
                    fair: #fair,
                })
            }
        }
        Limits::ThreadPool(pool) => {
            let ThreadPoolConfig {
                core_threads,
                max_threads,
                queue_capacity,
                keep_alive,
                on_full,
                max_queue_wait,
                thread_name_prefix,
                queue_order,
                codel,
            } = pool;
            let keep_alive = duration(*keep_alive);
            let on_full = match on_full {
                OnFull::Abort => quote!(#c::OnFull::Abort),
                OnFull::CallerRuns => quote!(#c::OnFull::CallerRuns),
                OnFull::Wait(wait) => {
                    let wait = duration(*wait);
                    quote!(#c::OnFull::Wait(#wait))
                }
                other => unknown(other),
            };
            let max_queue_wait = option(max_queue_wait.as_ref(), |d| duration(*d));
            let thread_name_prefix = option(
                thread_name_prefix.as_ref(),
                |prefix| quote!(::std::string::String::from(#prefix)),
            );
            let queue_order = match queue_order {
                QueueOrder::Fifo => quote!(#c::QueueOrder::Fifo),
                QueueOrder::AdaptiveLifo => quote!(#c::QueueOrder::AdaptiveLifo),
                other => unknown(other),
            };
            let codel = option(codel.as_ref(), |codel| {
                let CodelConfig { target, interval } = codel;
                let (target, interval) = (duration(*target), duration(*interval));
                quote!(#c::CodelConfig { target: #target, interval: #interval })
            });
            quote! {
                #c::Limits::ThreadPool(#c::ThreadPoolConfig {
                    core_threads: #core_threads,
                    max_threads: #max_threads,
                    queue_capacity: #queue_capacity,
                    keep_alive: #keep_alive,
                    on_full: #on_full,
                    max_queue_wait: #max_queue_wait,
                    thread_name_prefix: #thread_name_prefix,
                    queue_order: #queue_order,
                    codel: #codel,
                })
            }
        }
        other => unknown(other),
    }
}

fn rate_limit(rate_limit: &RateLimitConfig) -> TokenStream {
    let c = types();
    let RateLimitConfig {
        limit_for_period,
        refresh_period,
        timeout,
        scope,
        store,
    } = rate_limit;
    let (refresh_period, timeout) = (duration(*refresh_period), duration(*timeout));
    let scope = match scope {
        RateLimitScope::Process => quote!(#c::RateLimitScope::Process),
        RateLimitScope::Cluster => quote!(#c::RateLimitScope::Cluster),
        other => unknown(other),
    };
    let store = option(store.as_ref(), self::store);
    quote! {
        #c::RateLimitConfig {
            limit_for_period: #limit_for_period,
            refresh_period: #refresh_period,
            timeout: #timeout,
            scope: #scope,
            store: #store,
        }
    }
}

/// A cluster-wide limit's store. `redis` is emitted as written: a `${NAME}` is read from
/// the environment at run time, never at build time.
fn store(store: &RateLimitStore) -> TokenStream {
    let c = types();
    let RateLimitStore {
        redis,
        key_prefix,
        response_timeout,
        on_store_error,
        replicas,
        start_anyway,
    } = store;
    let response_timeout = duration(*response_timeout);
    let on_store_error = match on_store_error {
        OnStoreError::Local => quote!(#c::OnStoreError::Local),
        OnStoreError::Allow => quote!(#c::OnStoreError::Allow),
        OnStoreError::Refuse => quote!(#c::OnStoreError::Refuse),
        other => unknown(other),
    };
    quote! {
        #c::RateLimitStore {
            redis: ::std::string::String::from(#redis),
            key_prefix: ::std::string::String::from(#key_prefix),
            response_timeout: #response_timeout,
            on_store_error: #on_store_error,
            replicas: #replicas,
            start_anyway: #start_anyway,
        }
    }
}

fn saturation(saturation: &SaturationThresholds) -> TokenStream {
    let c = types();
    let SaturationThresholds {
        active_warning,
        active_critical,
        queue_warning,
        queue_critical,
    } = saturation;
    let [
        active_warning,
        active_critical,
        queue_warning,
        queue_critical,
    ] = [
        active_warning,
        active_critical,
        queue_warning,
        queue_critical,
    ]
    .map(|v| float(*v));
    quote! {
        #c::SaturationThresholds {
            active_warning: #active_warning,
            active_critical: #active_critical,
            queue_warning: #queue_warning,
            queue_critical: #queue_critical,
        }
    }
}

fn expected(expected: &Expected) -> TokenStream {
    let c = types();
    let Expected {
        latency,
        client_timeout,
    } = expected;
    let latency = duration(*latency);
    let client_timeout = option(client_timeout.as_ref(), |d| duration(*d));
    quote!(#c::Expected { latency: #latency, client_timeout: #client_timeout })
}

fn adaptive(adaptive: &AdaptiveConfig) -> TokenStream {
    let c = types();
    let AdaptiveConfig {
        algorithm,
        min_limit,
        max_limit,
        initial_limit,
        probe_interval,
        alpha,
        beta,
        tolerance,
        smoothing,
        backoff_ratio,
        timeout,
    } = adaptive;
    let algorithm = match algorithm {
        AdaptiveAlgorithm::Vegas => quote!(#c::AdaptiveAlgorithm::Vegas),
        AdaptiveAlgorithm::Gradient2 => quote!(#c::AdaptiveAlgorithm::Gradient2),
        AdaptiveAlgorithm::Aimd => quote!(#c::AdaptiveAlgorithm::Aimd),
        AdaptiveAlgorithm::Off => quote!(#c::AdaptiveAlgorithm::Off),
        other => unknown(other),
    };
    let [max_limit, initial_limit, probe_interval] =
        [max_limit, initial_limit, probe_interval].map(|v| option(v.as_ref(), |n| quote!(#n)));
    let [alpha, beta, tolerance, smoothing, backoff_ratio] =
        [alpha, beta, tolerance, smoothing, backoff_ratio]
            .map(|v| option(v.as_ref(), |f| float(*f)));
    let timeout = option(timeout.as_ref(), |d| duration(*d));
    quote! {
        #c::AdaptiveConfig {
            algorithm: #algorithm,
            min_limit: #min_limit,
            max_limit: #max_limit,
            initial_limit: #initial_limit,
            probe_interval: #probe_interval,
            alpha: #alpha,
            beta: #beta,
            tolerance: #tolerance,
            smoothing: #smoothing,
            backoff_ratio: #backoff_ratio,
            timeout: #timeout,
        }
    }
}

/// Exact, whatever the value: the bits of the `f64`.
fn float(value: f64) -> TokenStream {
    let bits = value.to_bits();
    quote!(f64::from_bits(#bits))
}

fn duration(duration: Duration) -> TokenStream {
    let c = types();
    let d = duration.as_std();
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(#c::Duration::from_std(::core::time::Duration::new(#secs, #nanos)))
}

fn option<T>(value: Option<&T>, emit: impl FnOnce(&T) -> TokenStream) -> TokenStream {
    match value {
        Some(value) => {
            let value = emit(value);
            quote!(::core::option::Option::Some(#value))
        }
        None => quote!(::core::option::Option::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variant_this_crate_does_not_emit_is_a_compile_error_naming_it() {
        let tokens = unknown(&OnFull::CallerRuns).to_string();
        assert!(tokens.starts_with(":: core :: compile_error !"), "{tokens}");
        assert!(tokens.contains("`CallerRuns`"), "{tokens}");
    }

    #[test]
    fn every_known_variant_is_emitted_as_a_path() {
        let pool = ThreadPoolConfig {
            on_full: OnFull::Wait(Duration::from_millis(5)),
            queue_order: QueueOrder::AdaptiveLifo,
            ..ThreadPoolConfig::default()
        };
        let tokens = limits(&Limits::ThreadPool(pool)).to_string();
        assert!(!tokens.contains("compile_error"), "{tokens}");
        assert!(tokens.contains("OnFull :: Wait"), "{tokens}");
        assert!(tokens.contains("QueueOrder :: AdaptiveLifo"), "{tokens}");
    }
}
