//! uniffi's bindgen, at the version the `psi-ffi` crate is built with (the two must match).

fn main() {
    uniffi::uniffi_bindgen_main()
}
