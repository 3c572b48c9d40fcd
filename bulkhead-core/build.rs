//! Sets `cfg(bulkhead_linked)` on the targets whose linkers gather a distributed slice
//! (`linkme`'s supported platforms), so `declaration.rs` names the list once. Not under
//! Miri, which cannot read linker sections: there bulkheads register at first use.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(bulkhead_linked)");
    println!("cargo::rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let linked = [
        "linux", "android", "macos", "ios", "windows", "freebsd", "openbsd", "illumos",
    ];
    let miri = std::env::var_os("CARGO_CFG_MIRI").is_some();
    if linked.contains(&os.as_str()) && !miri {
        println!("cargo::rustc-cfg=bulkhead_linked");
    }
}
