//! The named values of the configuration: each enum of a key (`mode`, `log`, `transport`,
//! `test`, ...) is declared once with [`names!`], one line per variant with its name and its
//! meaning, and everything that spells or explains a value comes from that declaration: the
//! key's parser ([`Names::from_name`]), the emitter ([`Names::name`]), the key's accepted
//! values in messages and docs ([`Names::NAMES`]), and, with the `clap` feature, the host
//! tools' command-line value lists and their help ([`clap::ValueEnum`]).

/// An enum whose every value has one name in the configuration's vocabulary.
pub trait Names: Copy + 'static {
    /// Every value, in the order the key lists them.
    const ALL: &'static [Self];
    /// Every value's name, in [`Self::ALL`]'s order.
    const NAMES: &'static [&'static str];
    /// Whether a name is recognised in any letter case (`transport=ud`), or only as written.
    const ANY_CASE: bool;

    /// The value's name, as the configuration writes it.
    fn name(self) -> &'static str;

    /// What the value means (one sentence, for help texts).
    fn help(self) -> &'static str;

    /// The value called `name` ([`Self::ANY_CASE`]: in any letter case).
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| {
            if Self::ANY_CASE {
                v.name().eq_ignore_ascii_case(name)
            } else {
                v.name() == name
            }
        })
    }
}

/// Declares a named enum: the enum with its variants' docs, [`Names`], inherent `ALL`,
/// `name`, `from_name` and `help` (so callers need not import the trait), `Display` (the
/// name), and with the `clap` feature `clap::ValueEnum` (the same names, the same help, the
/// same case rule).
///
/// ```text
/// names! {
///     /// Console verbosity.
///     pub enum LogLevel (exact case) {
///         /// Errors only.
///         Error = "error",
///         ...
///     }
/// }
/// ```
macro_rules! names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $Enum:ident ($case:ident case) {
            $(
                $(#[doc = $doc:literal])*
                $Variant:ident = $name:literal,
            )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $Enum {
            $(
                $(#[doc = $doc])*
                $Variant,
            )+
        }

        impl $Enum {
            /// Every value, in the order the key lists them.
            pub const ALL: [$Enum; [$($name),+].len()] = [$($Enum::$Variant),+];
            /// Every value's name, in [`Self::ALL`]'s order.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The value's name, as the configuration writes it.
            pub fn name(self) -> &'static str {
                match self {
                    $($Enum::$Variant => $name,)+
                }
            }

            /// What the value means (its doc comment), for help texts.
            pub fn help(self) -> &'static str {
                match self {
                    $($Enum::$Variant => concat!($($doc),*).trim_start(),)+
                }
            }

            /// The value called `name` (see [`crate::names::Names::ANY_CASE`]).
            pub fn from_name(name: &str) -> Option<$Enum> {
                <$Enum as $crate::names::Names>::from_name(name)
            }
        }

        /// The value's name.
        impl core::fmt::Display for $Enum {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl $crate::names::Names for $Enum {
            const ALL: &'static [Self] = &$Enum::ALL;
            const NAMES: &'static [&'static str] = $Enum::NAMES;
            const ANY_CASE: bool = names!(@any_case $case);
            fn name(self) -> &'static str {
                $Enum::name(self)
            }
            fn help(self) -> &'static str {
                $Enum::help(self)
            }
        }

        #[cfg(feature = "clap")]
        impl clap::ValueEnum for $Enum {
            fn value_variants<'a>() -> &'a [Self] {
                &$Enum::ALL
            }
            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
            }
            fn from_str(input: &str, ignore_case: bool) -> Result<Self, std::string::String> {
                let found = if ignore_case {
                    $Enum::ALL.into_iter().find(|v| v.name().eq_ignore_ascii_case(input))
                } else {
                    $Enum::from_name(input)
                };
                found.ok_or_else(|| std::format!("invalid variant: {input}"))
            }
        }
    };
    (@any_case any) => { true };
    (@any_case exact) => { false };
}

pub(crate) use names;

/// The words of a list of names, `a|b|c`, as the keys' messages and docs write them.
pub struct Alternatives(pub &'static [&'static str]);

impl core::fmt::Display for Alternatives {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, name) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    names! {
        /// A test enum.
        pub enum Colour (exact case) {
            /// The colour of
            /// the sky.
            Blue = "blue",
            /// Grass.
            Green = "green",
        }
    }

    names! {
        /// Another, any case.
        pub enum Shape (any case) {
            /// Four sides.
            Square = "SQUARE",
        }
    }

    #[test]
    fn one_declaration_gives_names_parser_and_help() {
        assert_eq!(Colour::ALL, [Colour::Blue, Colour::Green]);
        assert_eq!(Colour::NAMES, ["blue", "green"]);
        assert_eq!(Colour::Green.name(), "green");
        assert_eq!(Colour::from_name("blue"), Some(Colour::Blue));
        assert_eq!(Colour::from_name("Blue"), None, "exact case");
        assert_eq!(Colour::Blue.help(), "The colour of the sky.");
        assert_eq!(Shape::from_name("square"), Some(Shape::Square));
        assert_eq!(Alternatives(Colour::NAMES).to_string(), "blue|green");
        for c in Colour::ALL {
            assert_eq!(Colour::from_name(c.name()), Some(c), "names round-trip");
        }
    }

    #[cfg(feature = "clap")]
    #[test]
    fn the_command_line_takes_the_same_names_and_help() {
        use clap::ValueEnum;
        let names: std::vec::Vec<_> = Colour::value_variants()
            .iter()
            .map(|c| c.to_possible_value().unwrap().get_name().to_string())
            .collect();
        assert_eq!(names, Colour::NAMES);
        let help = Colour::Blue.to_possible_value().unwrap();
        assert_eq!(
            help.get_help().map(ToString::to_string).as_deref(),
            Some("The colour of the sky.")
        );
        assert_eq!(Shape::from_str("Square", false), Ok(Shape::Square));
        assert!(Colour::from_str("BLUE", false).is_err());
        assert_eq!(Colour::from_str("BLUE", true), Ok(Colour::Blue));
    }
}
