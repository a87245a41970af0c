//! Raw UCP bindings, generated at build time from the system's `<ucp/api/ucp.h>`. Only the generated
//! declarations live here; the safe layer is the `ucx` crate.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case, dead_code, missing_docs)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `ucp_init` is a static inline in the header: it calls this with the header's API version.
///
/// # Safety
/// As `ucp_init_version`: `params` and `config` must be valid (config may be null), `context_p` writable.
pub unsafe fn ucp_init(params: *const ucp_params_t, config: *const ucp_config_t, context_p: *mut ucp_context_h) -> ucs_status_t {
    // SAFETY: forwarded under the caller's contract; the version constants come from the same header.
    unsafe { ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, params, config, context_p) }
}

/// `UCS_PTR_IS_ERR`: UCX returns small negative status codes cast to pointers.
pub fn ucs_ptr_is_err<T>(p: *mut T) -> bool {
    (p as usize) >= (UCS_ERR_LAST as isize as usize)
}

/// `UCS_PTR_IS_PTR`: a real request pointer (neither NULL nor an error).
pub fn ucs_ptr_is_ptr<T>(p: *mut T) -> bool {
    (p as usize).wrapping_sub(1) < (UCS_ERR_LAST as isize as usize).wrapping_sub(1)
}

/// `UCS_PTR_STATUS`.
pub fn ucs_ptr_status<T>(p: *mut T) -> ucs_status_t {
    p as isize as ucs_status_t
}
