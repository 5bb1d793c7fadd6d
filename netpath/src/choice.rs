//! `choice!`: an option value the command line takes and the records carry (`--proto`,
//! `--wait`, `--backend`, `--driver`).

/// Declares the enum of one such choice from one row a variant, `Variant => "name",`. The name
/// is written once: clap parses it, serde and the JSON schema write it, `name()` and `Display`
/// return it, and `ALL` lists the variants in row order.
macro_rules! choice {
    ($(#[$meta:meta])* pub enum $ty:ident {
        $($(#[$vmeta:meta])* $v:ident => $name:literal,)*
    }) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize,
            serde::Deserialize,
            schemars::JsonSchema,
        )]
        pub enum $ty {
            $($(#[$vmeta])* #[value(name = $name)] #[serde(rename = $name)] $v,)*
        }

        impl $ty {
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$v),*];

            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$v => $name,)*
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use choice;
