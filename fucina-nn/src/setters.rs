//! `setters!`: builder methods that each set one field and hand the value
//! back (`LoraConfig::new(..).with_dropout(0.1)`), for the option and config
//! structs of fucina-nn and of the crates above it (fucina-train's
//! `LoaderOptions`).

/// Builder methods, one per `name(arg: Type) => field` row, each with its
/// doc comment: `pub fn name(mut self, arg: Type) -> Self { self.field = arg; self }`.
/// Invoked inside the struct's `impl` block.
#[macro_export]
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$field = $arg;
                self
            }
        )*
    };
}
