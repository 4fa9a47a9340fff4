//! The one shape of every options struct: `#[non_exhaustive]`, `Default`, and a chainable setter
//! per field, so that `TokioOptions::default().depth(32).max_gap(0)` reads the same in every
//! backend and a field added later breaks no caller.

/// Writes a chainable setter for each named field of an options struct: `name: Type` sets the
/// field to the value; in the optional `some { .. }` list, `name: Type` sets an `Option<Type>`
/// field to `Some(value)`.
#[doc(hidden)]
#[macro_export]
macro_rules! options_setters {
    ($ty:ident { $($field:ident: $fty:ty),* $(,)? } $(some { $($ofield:ident: $oty:ty),* $(,)? })?) => {
        impl $ty {
            $(
                #[doc = concat!("Sets `", stringify!($field), "`.")]
                #[must_use]
                pub fn $field(mut self, $field: $fty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
            $($(
                #[doc = concat!("Sets `", stringify!($ofield), "` to `Some(", stringify!($ofield), ")`.")]
                #[must_use]
                pub fn $ofield(mut self, $ofield: $oty) -> Self {
                    self.$ofield = Some($ofield);
                    self
                }
            )*)?
        }
    };
}

#[cfg(test)]
mod tests {
    #[derive(Debug, Default, PartialEq)]
    struct Opts {
        depth: usize,
        name: Option<String>,
    }
    crate::options_setters!(Opts { depth: usize } some { name: String });

    #[test]
    fn options_setters_set_each_field() {
        let o = Opts::default().depth(3).name("x".to_string());
        assert_eq!(o, Opts { depth: 3, name: Some("x".to_string()) });
    }
}
