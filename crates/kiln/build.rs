//! The release link of the kiln binary places the functions a run executes together
//! (`link-order.txt`, written by `scripts/link_order.py`): the kernel maps code 64 KiB around
//! each page a process faults in, and spread over 20 MB of .text the code of one load run kept
//! 5 MiB of the binary resident; together, 2 MiB (peak RSS at 64 connections 15.9 → 10.1 MiB,
//! docs/benchmarks.md). Relative relocations are packed (DT_RELR) where the C library reads
//! them: the dynamic loader otherwise reads 1 MB of them at every start.
//!
//! Only where the linker is known to be lld, which Rust uses by default for
//! x86_64-unknown-linux-gnu, and no linker is configured; `KILN_LINK_ORDER=0` turns it off.

use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link-order.txt");
    println!("cargo:rerun-if-env-changed=KILN_LINK_ORDER");
    if !default_lld_release() {
        return;
    }
    let order = env::current_dir()
        .expect("the build script runs in the crate's folder")
        .join("link-order.txt");
    if order.exists() {
        println!(
            "cargo:rustc-link-arg-bin=kiln=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // symbols of earlier builds are passed over, not warned about
        println!("cargo:rustc-link-arg-bin=kiln=-Wl,--no-warn-symbol-ordering");
    }
    if native_glibc_reads_relr() {
        println!("cargo:rustc-link-arg-bin=kiln=-Wl,-z,pack-relative-relocs");
    }
}

/// A release build for x86_64-unknown-linux-gnu with Rust's own lld: no linker configured,
/// none chosen in the flags, and not turned off.
fn default_lld_release() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    var("PROFILE") == "release"
        && var("TARGET") == "x86_64-unknown-linux-gnu"
        && var("KILN_LINK_ORDER") != "0"
        && env::var_os("RUSTC_LINKER").is_none()
        && !["linker", "fuse-ld", "link-self-contained"]
            .iter()
            .any(|f| flags.contains(f))
}

/// Whether the binary runs where it is built (not cross-compiled) on a glibc of 2.36 or later,
/// the first to read packed relative relocations.
fn native_glibc_reads_relr() -> bool {
    if env::var("HOST").ok() != env::var("TARGET").ok() {
        return false;
    }
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.trim().strip_prefix("glibc ").unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}
