//! The command line, parsed by hand: three subcommands and a few flags.

use std::fmt;

/// What to run.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Help,
    Probe { file: String },
    Bench(BenchArgs),
    Gather { file: String, row_size: u64, hex: bool, rows: Vec<u64> },
}

/// `eagerio bench`'s arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct BenchArgs {
    pub file: String,
    pub row_size: u64,
    pub rows: usize,
    pub runs: usize,
    pub svg: Option<String>,
}

/// Arguments that do not make a command; the message says which and why.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(why: impl Into<String>) -> UsageError {
    UsageError(why.into())
}

/// A positive integer for `flag`.
fn number<T: std::str::FromStr + PartialOrd + Default>(flag: &str, value: Option<&String>) -> Result<T, UsageError> {
    let value = value.ok_or_else(|| usage(format!("{flag} needs a value")))?;
    match value.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err(usage(format!("{flag} {value:?}: expected a positive integer"))),
    }
}

pub fn parse(args: &[String]) -> Result<Command, UsageError> {
    let Some((sub, rest)) = args.split_first() else { return Err(usage("a command is needed")) };
    match sub.as_str() {
        "help" | "-h" | "--help" => Ok(Command::Help),
        "probe" => match rest {
            [file] if !file.starts_with('-') => Ok(Command::Probe { file: file.clone() }),
            _ => Err(usage("probe takes one FILE")),
        },
        "bench" | "gather" => {
            let mut file = None;
            let (mut row_size, mut rows, mut runs, mut svg, mut hex) = (None, 10_000, 3, None, false);
            let mut ids = Vec::new();
            let mut it = rest.iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--row-size" => row_size = Some(number::<u64>(a, it.next())?),
                    "--rows" if sub == "bench" => rows = number(a, it.next())?,
                    "--runs" if sub == "bench" => runs = number(a, it.next())?,
                    "--svg" if sub == "bench" => {
                        svg = Some(it.next().ok_or_else(|| usage("--svg needs a path"))?.clone())
                    }
                    "--hex" if sub == "gather" => hex = true,
                    flag if flag.starts_with('-') => return Err(usage(format!("{sub}: unknown flag {flag}"))),
                    value if file.is_none() => file = Some(value.to_string()),
                    row if sub == "gather" => ids.push(
                        row.parse::<u64>().map_err(|_| usage(format!("gather: row {row:?} is not a row number")))?,
                    ),
                    extra => return Err(usage(format!("bench: unexpected argument {extra:?}"))),
                }
            }
            let file = file.ok_or_else(|| usage(format!("{sub} needs a FILE")))?;
            let row_size = row_size.ok_or_else(|| usage(format!("{sub} needs --row-size N")))?;
            if sub == "bench" {
                return Ok(Command::Bench(BenchArgs { file, row_size, rows, runs, svg }));
            }
            if ids.is_empty() {
                return Err(usage("gather needs at least one ROW"));
            }
            Ok(Command::Gather { file, row_size, hex, rows: ids })
        }
        other => Err(usage(format!("unknown command {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Result<Command, UsageError> {
        parse(&line.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    }

    #[test]
    fn args_parse_each_command() {
        assert_eq!(p("probe t.bin"), Ok(Command::Probe { file: "t.bin".into() }));
        assert_eq!(
            p("gather t.bin --row-size 90 --hex 3 1 3"),
            Ok(Command::Gather { file: "t.bin".into(), row_size: 90, hex: true, rows: vec![3, 1, 3] })
        );
        assert_eq!(
            p("bench t.bin --row-size 4096 --rows 500 --runs 2 --svg c.svg"),
            Ok(Command::Bench(BenchArgs {
                file: "t.bin".into(),
                row_size: 4096,
                rows: 500,
                runs: 2,
                svg: Some("c.svg".into())
            }))
        );
    }

    #[test]
    fn args_refuse_what_makes_no_command() {
        for (line, why) in [
            ("", "a command is needed"),
            ("frobnicate x", "unknown command"),
            ("probe", "probe takes one FILE"),
            ("gather t.bin 1 2", "needs --row-size"),
            ("gather t.bin --row-size 0 1", "expected a positive integer"),
            ("gather t.bin --row-size x 1", "expected a positive integer"),
            ("gather t.bin --row-size 8", "at least one ROW"),
            ("gather t.bin --row-size 8 -3", "unknown flag -3"),
            ("gather t.bin --row-size 8 x", "is not a row number"),
            ("bench t.bin --row-size 8 --hex", "unknown flag --hex"),
            ("bench --row-size 8", "needs a FILE"),
            ("bench t.bin --row-size", "needs a value"),
        ] {
            let e = p(line).unwrap_err();
            assert!(e.0.contains(why), "{line:?}: {e}");
        }
    }
}
