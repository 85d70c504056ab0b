//! Closed sets of strings KubeFed writes into conditions and statuses.
//!
//! The wire fields stay `String` (KubeFed types them as plain strings and other writers may
//! use values we do not know); these enums give the known values one spelling.

/// Declares a fieldless enum whose variants map to fixed wire strings.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )+ ];

            /// The exact string KubeFed puts on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }

            /// The value for a wire string, `None` when KubeFed never writes it.
            pub fn parse(value: &str) -> Option<Self> {
                match value {
                    $( $wire => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use string_enum;

string_enum! {
    /// `status` of a condition (`k8s.io/api/core/v1.ConditionStatus`).
    pub enum ConditionStatus {
        True => "True",
        False => "False",
        Unknown => "Unknown",
    }
}

impl From<bool> for ConditionStatus {
    fn from(value: bool) -> Self {
        if value { Self::True } else { Self::False }
    }
}

/// Schema of `Option<T>` for a string enum `T` without the `null` member schemars adds: the
/// API server does not accept `null` among enum values. Use with `#[schemars(schema_with)]`.
pub(crate) fn optional_enum_schema<T: schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    T::json_schema(generator)
}
