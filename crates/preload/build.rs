//! Compiles the C shim (variadic `open`/`openat`/`fcntl`/`ioctl` and the stdio hooks
//! over `fopencookie`) and exports its symbols: rustc's version script exports only
//! Rust items, so `exports.map` (merged by the linker) adds the C ones.

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=exports.map");
    cc::Build::new()
        .file("src/shim.c")
        .flag_if_supported("-U_FORTIFY_SOURCE")
        .warnings(true)
        .extra_warnings(true)
        .cargo_metadata(false)
        .compile("pvfs_preload_shim");
    // Linked whole: nothing in Rust references the hooks, so a plain static link would
    // drop them.
    let out = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    println!("cargo:rustc-link-search=native={out}");
    println!("cargo:rustc-link-lib=static:+whole-archive=pvfs_preload_shim");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/exports.map");
}
