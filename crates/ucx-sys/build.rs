//! Generate bindings against the UCX headers installed on this machine (Debian `libucx-dev`), so the
//! struct layouts and constants are those of the library we link, whatever its version.

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rustc-link-lib=ucp");
    println!("cargo:rustc-link-lib=ucs");
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("ucp_.*")
        .allowlist_function("ucs_status_string")
        .allowlist_type("ucp_.*")
        .allowlist_type("ucs_status_t")
        .allowlist_type("ucs_thread_mode_t")
        .allowlist_var("UCP_.*")
        .allowlist_var("UCS_.*")
        // UCX may return values this header did not know; constants cannot be out of range.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over <ucp/api/ucp.h> failed ({e}); install libucx-dev (scripts/setup.sh does)"));
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings.write_to_file(out.join("bindings.rs")).expect("write bindings");
}
