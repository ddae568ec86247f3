//! `ramstore server --config FILE` and `ramstore coordinator --config FILE`: a TOML
//! file whose settings are the command's flags, with the same names (without the
//! dashes): `memory = "4GiB"`, `backup-dir = "/var/lib/ramstore/backup"`,
//! `prefault-memory = true`. Underscores may stand for dashes (`backup_dir`).
//!
//! The file is applied by turning each setting into its flag, placed before the
//! command line's own flags, so the argument parser checks file values exactly as
//! flags and a flag on the command line overrides the file (the later value wins,
//! `args_override_self`). A setting that is also given by the environment or a flag
//! before the subcommand (`RAMSTORE_COORDINATOR`, `ramstore --coordinator A server`)
//! is left to those. Precedence: flags, then the environment, then the file, then
//! the defaults.

use std::ffi::OsString;
use std::path::Path;

use clap::{ArgAction, CommandFactory};

/// The subcommands that take `--config`.
const CONFIGURABLE: [&str; 2] = ["server", "coordinator"];

/// A config file that cannot be used: a usage error (exit 2).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// `args` (the whole command line, program name first) with the settings of a
/// `--config FILE` given to `server` or `coordinator` inserted as flags right
/// after the subcommand; `args` unchanged when there is no such file.
pub fn expand<C: CommandFactory>(args: Vec<OsString>) -> Result<Vec<OsString>, ConfigError> {
    let Some(sub_at) = subcommand_index(&args) else {
        return Ok(args);
    };
    let Some(sub) = args[sub_at].to_str().filter(|s| CONFIGURABLE.contains(s)) else {
        return Ok(args);
    };
    let Some(path) = config_path(&args[sub_at + 1..]) else {
        return Ok(args);
    };
    let top_level_coordinator = args[1..sub_at]
        .iter()
        .any(|a| a == "--coordinator" || a.to_string_lossy().starts_with("--coordinator="))
        || std::env::var_os("RAMSTORE_COORDINATOR").is_some_and(|v| !v.is_empty());
    let text = std::fs::read_to_string(&path).map_err(|e| {
        ConfigError(format!(
            "cannot read the config file {}: {e}",
            Path::new(&path).display()
        ))
    })?;
    let command = C::command();
    let sub_command = command
        .find_subcommand(sub)
        .expect("CONFIGURABLE names subcommands of the CLI"); // checked by a unit test
    let settings = flags_from_toml(sub_command, &text, top_level_coordinator)
        .map_err(|e| ConfigError(format!("config file {}: {e}", Path::new(&path).display())))?;
    let mut out = Vec::with_capacity(args.len() + settings.len());
    out.extend_from_slice(&args[..=sub_at]);
    out.extend(settings.into_iter().map(OsString::from));
    out.extend_from_slice(&args[sub_at + 1..]);
    Ok(out)
}

/// Where the subcommand is: the first argument that is not a top-level option (the
/// only top-level options are `--coordinator ADDR`, `--help` and `--version`).
fn subcommand_index(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if a == "--coordinator" {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Some(i);
        }
    }
    None
}

/// The value of `--config PATH` or `--config=PATH` among a subcommand's arguments
/// (the last one wins, as for every flag).
fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--" {
            break;
        }
        if args[i] == "--config" {
            found = args.get(i + 1).cloned();
            i += 2;
            continue;
        }
        if let Some(path) = args[i].to_str().and_then(|a| a.strip_prefix("--config=")) {
            found = Some(path.into());
        }
        i += 1;
    }
    found
}

/// The flags that the TOML `text` stands for, for subcommand `command`.
fn flags_from_toml(
    command: &clap::Command,
    text: &str,
    skip_coordinator: bool,
) -> Result<Vec<String>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        // The parser's message spans lines (it quotes the file); one line is enough.
        e.message().to_string()
    })?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let name = key.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(name.as_str()))
            .filter(|_| name != "config" && name != "help")
            .ok_or_else(|| {
                format!(
                    "unknown setting '{key}' (the settings are the flags of `ramstore {} \
                     --help`, without the dashes)",
                    command.get_name()
                )
            })?;
        if name == "coordinator" && skip_coordinator {
            continue;
        }
        let flag = format!("--{name}");
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(true)) => flags.push(flag),
            (ArgAction::SetTrue, toml::Value::Boolean(false)) => {}
            (ArgAction::SetTrue, _) => {
                return Err(format!("'{key}' is true or false"));
            }
            (_, toml::Value::String(s)) => flags.push(format!("{flag}={s}")),
            (_, toml::Value::Integer(n)) => flags.push(format!("{flag}={n}")),
            (_, toml::Value::Float(x)) => flags.push(format!("{flag}={x}")),
            (_, toml::Value::Boolean(b)) => flags.push(format!("{flag}={b}")),
            // A list of addresses (`coordinator = ["a:7000", "b:7000"]`) is the
            // flag's comma-separated form.
            (_, toml::Value::Array(items)) => {
                let items: Option<Vec<String>> = items
                    .iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Some(s.clone()),
                        _ => None,
                    })
                    .collect();
                let items = items.ok_or_else(|| format!("'{key}' is a list of strings"))?;
                flags.push(format!("{flag}={}", items.join(",")));
            }
            (_, _) => return Err(format!("'{key}' must be a string, number or true/false")),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[arg(long, global = false)]
        coordinator: Option<String>,
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        #[command(args_override_self = true)]
        Server {
            #[arg(long)]
            config: Option<String>,
            #[arg(long)]
            coordinator: Option<String>,
            #[arg(long, default_value = "1GiB")]
            memory: String,
            #[arg(long)]
            backup_dir: Option<String>,
            #[arg(long)]
            prefault_memory: bool,
        },
        Coordinator {
            #[arg(long)]
            config: Option<String>,
        },
        Tables,
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn flags(text: &str) -> Result<Vec<String>, String> {
        let command = Cli::command();
        flags_from_toml(command.find_subcommand("server").unwrap(), text, false)
    }

    #[test]
    fn flags_from_toml_same_names_as_flags() {
        assert_eq!(
            flags(
                "memory = \"4GiB\"\nbackup_dir = \"/b\"\nprefault-memory = true\n\
                 coordinator = [\"a:1\", \"b:2\"]\n"
            )
            .unwrap(),
            [
                "--backup-dir=/b",
                "--coordinator=a:1,b:2",
                "--memory=4GiB",
                "--prefault-memory",
            ]
        );
        assert_eq!(
            flags("prefault-memory = false").unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn flags_from_toml_refuses_unknown_and_mistyped_settings() {
        let e = flags("memroy = \"1GiB\"").unwrap_err();
        assert!(e.contains("unknown setting 'memroy'"), "{e}");
        assert!(flags("config = \"x\"").unwrap_err().contains("unknown"));
        assert!(flags("prefault-memory = 1")
            .unwrap_err()
            .contains("true or false"));
        assert!(flags("memory = { a = 1 }").is_err());
        assert!(flags("memory = [1]")
            .unwrap_err()
            .contains("list of strings"));
        let e = flags("memory = ").unwrap_err();
        assert!(!e.contains('\n'), "one line: {e}");
    }

    #[test]
    fn expand_inserts_the_file_before_the_command_line_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "memory = \"4GiB\"\n").unwrap();
        let p = path.to_str().unwrap();
        let args = expand::<Cli>(os(&[
            "ramstore", "server", "--config", p, "--memory", "2GiB",
        ]))
        .unwrap();
        assert_eq!(
            args,
            os(&[
                "ramstore",
                "server",
                "--memory=4GiB",
                "--config",
                p,
                "--memory",
                "2GiB"
            ])
        );
        // The later flag wins.
        let cli = <Cli as clap::Parser>::try_parse_from(&args).unwrap();
        let Sub::Server { memory, .. } = cli.command else {
            panic!()
        };
        assert_eq!(memory, "2GiB");

        // --config=PATH, after a top-level flag.
        let args = expand::<Cli>(os(&[
            "ramstore",
            "--coordinator",
            "c:1",
            "server",
            &format!("--config={p}"),
        ]))
        .unwrap();
        assert_eq!(args[4], "--memory=4GiB");
        // Other subcommands and no --config: unchanged.
        let plain = os(&["ramstore", "tables", "--config", p]);
        assert_eq!(expand::<Cli>(plain.clone()).unwrap(), plain);
        let plain = os(&["ramstore", "server", "--memory", "1GiB"]);
        assert_eq!(expand::<Cli>(plain.clone()).unwrap(), plain);
    }

    #[test]
    fn expand_leaves_coordinator_to_a_top_level_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "coordinator = \"file:1\"\n").unwrap();
        let p = path.to_str().unwrap();
        let args = expand::<Cli>(os(&[
            "ramstore",
            "--coordinator=flag:1",
            "server",
            "--config",
            p,
        ]))
        .unwrap();
        assert_eq!(
            args,
            os(&["ramstore", "--coordinator=flag:1", "server", "--config", p])
        );
    }

    #[test]
    fn expand_reports_a_missing_file() {
        let e = expand::<Cli>(os(&[
            "ramstore",
            "coordinator",
            "--config",
            "/nonexistent/x",
        ]))
        .unwrap_err();
        assert!(
            e.0.starts_with("cannot read the config file /nonexistent/x"),
            "{e}"
        );
    }
}
