//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, CLIENT, QUIT. They change
//! or report the connection's own state (protocol version, authentication,
//! database, name) and touch no data.
//!
//! Where ramstore differs from Redis: there are no ACL users, only `default`,
//! whose password is `--requirepass`. Without one, `AUTH password` is refused with
//! Redis's error, and `AUTH default anything` (or HELLO's AUTH option) is accepted,
//! as Redis's password-less default user accepts any password.
//! HELLO takes the last AUTH option given, as Redis does. CLIENT knows ID,
//! GETNAME, SETNAME and SETINFO (the last accepted and forgotten). SELECT picks
//! table `db{n}` for n below [`super::MAX_DATABASES`].

use super::{eq, shown, Command, Connection, ParseError, MAX_DATABASES, REDIS_COMPAT_VERSION};
use crate::protocol::{parse_i64, Version};
use crate::sink::Sink;

/// Longest client name (CLIENT SETNAME), in bytes.
pub const MAX_CLIENT_NAME_BYTES: usize = 256;

/// HELLO's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The protocol asked for; `None`: keep the current one.
    pub version: Option<Version>,
    /// The last `AUTH user pass` option.
    pub auth: Option<(&'a [u8], &'a [u8])>,
    /// The last `SETNAME name` option (checked once authenticated).
    pub name: Option<&'a [u8]>,
}

/// CLIENT's subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientSub<'a> {
    Id,
    GetName,
    /// A valid name; empty clears it.
    SetName(&'a [u8]),
    /// Client libraries announce their name and version; nothing to keep.
    SetInfo,
}

pub(super) fn parse_ping<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [] => Ok(Command::Ping { message: None }),
        [message] => Ok(Command::Ping {
            message: Some(message),
        }),
        _ => Err(ParseError::WrongArity("ping")),
    }
}

pub(super) fn parse_echo<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [message] => Ok(Command::Echo { message }),
        _ => Err(ParseError::WrongArity("echo")),
    }
}

pub(super) fn parse_quit<'a>(_rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    Ok(Command::Quit)
}

pub(super) fn parse_hello<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let mut hello = Hello {
        version: None,
        auth: None,
        name: None,
    };
    let options = match rest.split_first() {
        None => rest,
        Some((v, options)) => {
            hello.version = Some(match parse_i64(v) {
                Some(2) => Version::Resp2,
                Some(3) => Version::Resp3,
                Some(_) => return Err(ParseError::UnsupportedProtocol),
                None => return Err(ParseError::ProtocolNotInteger),
            });
            options
        }
    };
    let mut i = 0;
    while i < options.len() {
        match &options[i..] {
            [opt, user, pass, ..] if eq(opt, "auth") => {
                hello.auth = Some((user, pass));
                i += 3;
            }
            [opt, name, ..] if eq(opt, "setname") => {
                hello.name = Some(name);
                i += 2;
            }
            _ => return Err(ParseError::Syntax),
        }
    }
    Ok(Command::Hello(hello))
}

pub(super) fn parse_auth<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    match rest {
        [pass] => Ok(Command::Auth { user: None, pass }),
        [user, pass] => Ok(Command::Auth {
            user: Some(user),
            pass,
        }),
        _ => Err(ParseError::Syntax),
    }
}

pub(super) fn parse_select<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let [db] = rest else {
        return Err(ParseError::WrongArity("select"));
    };
    match parse_i64(db).map(u32::try_from) {
        Some(Ok(db)) if db < MAX_DATABASES => Ok(Command::Select { db }),
        Some(_) => Err(ParseError::DbIndexOutOfRange),
        None => Err(ParseError::NotInteger),
    }
}

pub(super) fn parse_client<'a>(rest: &'a [&'a [u8]]) -> Result<Command<'a>, ParseError> {
    let sub = match rest {
        [sub] if eq(sub, "id") => ClientSub::Id,
        [sub] if eq(sub, "getname") => ClientSub::GetName,
        [sub, name] if eq(sub, "setname") => {
            valid_name(name)?;
            ClientSub::SetName(name)
        }
        [sub, _, _] if eq(sub, "setinfo") => ClientSub::SetInfo,
        [sub, ..] => return Err(ParseError::ClientSubcommand(shown(sub))),
        [] => return Err(ParseError::WrongArity("client")),
    };
    Ok(Command::Client(sub))
}

/// Whether `name` may be a client name (Redis's rule: printable, no spaces).
fn valid_name(name: &[u8]) -> Result<(), ParseError> {
    if name.len() > MAX_CLIENT_NAME_BYTES {
        return Err(ParseError::ClientNameTooLong);
    }
    if name.iter().any(|&b| b <= b' ' || b > b'~') {
        return Err(ParseError::ClientNameInvalid);
    }
    Ok(())
}

/// Compares passwords in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// Redis's answer to `AUTH password` when no password is configured.
const AUTH_WITHOUT_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";

impl Connection {
    pub(super) fn ping(&self, message: Option<&[u8]>, sink: &mut Sink) {
        match message {
            None => sink.reply(self.version, |e| e.simple("PONG")),
            Some(msg) => sink.reply(self.version, |e| e.bulk(msg)),
        }
    }

    pub(super) fn select(&mut self, db: u32, sink: &mut Sink) {
        self.db = db;
        self.table = None;
        sink.reply(self.version, |e| e.ok());
    }

    fn check_password(&self, user: &[u8], pass: &[u8]) -> bool {
        if user != b"default" {
            return false;
        }
        match &self.shared.config.require_pass {
            // No password configured: the default user needs none (see the module
            // docs: AUTH is accepted rather than refused).
            None => true,
            Some(p) => constant_time_eq(p.as_bytes(), pass),
        }
    }

    /// AUTH; `user` is `None` for the one-argument form.
    pub(super) fn auth(&mut self, user: Option<&[u8]>, pass: &[u8], sink: &mut Sink) {
        if user.is_none() && self.shared.config.require_pass.is_none() {
            return self.error(sink, AUTH_WITHOUT_PASSWORD);
        }
        if self.check_password(user.unwrap_or(b"default"), pass) {
            self.authenticated = true;
            sink.reply(self.version, |e| e.ok());
        } else {
            self.error(sink, WRONGPASS);
        }
    }

    pub(super) fn hello(&mut self, hello: Hello<'_>, sink: &mut Sink) {
        if let Some((user, pass)) = hello.auth {
            if !self.check_password(user, pass) {
                return self.error(sink, WRONGPASS);
            }
            self.authenticated = true;
        }
        if !self.authenticated {
            return self.error(
                sink,
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        if let Some(n) = hello.name {
            if let Err(e) = valid_name(n) {
                return self.error(sink, &e.to_string());
            }
            self.name = Some(n.to_vec());
        }
        let version = hello.version.unwrap_or(self.version);
        self.version = version;
        let proto = match version {
            Version::Resp2 => 2,
            Version::Resp3 => 3,
        };
        let id = i64::try_from(self.id).unwrap_or(i64::MAX);
        sink.reply(version, |e| {
            e.map(7);
            e.bulk(b"server");
            e.bulk(b"redis");
            e.bulk(b"version");
            e.bulk(REDIS_COMPAT_VERSION.as_bytes());
            e.bulk(b"proto");
            e.integer(proto);
            e.bulk(b"id");
            e.integer(id);
            e.bulk(b"mode");
            e.bulk(b"standalone");
            e.bulk(b"role");
            e.bulk(b"master");
            e.bulk(b"modules");
            e.array(0);
        });
    }

    pub(super) fn client(&mut self, sub: ClientSub<'_>, sink: &mut Sink) {
        match sub {
            ClientSub::Id => {
                let id = i64::try_from(self.id).unwrap_or(i64::MAX);
                sink.reply(self.version, |e| e.integer(id));
            }
            ClientSub::GetName => {
                let name = self.name.as_deref();
                sink.reply(self.version, |e| match name {
                    Some(n) => e.bulk(n),
                    None => e.null(),
                });
            }
            ClientSub::SetName(name) => {
                self.name = (!name.is_empty()).then(|| name.to_vec());
                sink.reply(self.version, |e| e.ok());
            }
            ClientSub::SetInfo => sink.reply(self.version, |e| e.ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn parsed(words: &[&str]) -> Result<String, String> {
        let frame: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        parse(&frame)
            .map(|c| format!("{c:?}"))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parse_connection_commands_good_arguments() {
        assert_eq!(parsed(&["PING"]), Ok("Ping { message: None }".into()));
        assert_eq!(
            parsed(&["ping", "hi"]),
            Ok("Ping { message: Some([104, 105]) }".into())
        );
        assert_eq!(parsed(&["select", "15"]), Ok("Select { db: 15 }".into()));
        assert_eq!(parsed(&["quit"]), Ok("Quit".into()));
        assert_eq!(parsed(&["client", "ID"]), Ok("Client(Id)".into()));
        assert_eq!(
            parsed(&["client", "setinfo", "lib-name", "x"]),
            Ok("Client(SetInfo)".into())
        );
        let frame: Vec<&[u8]> = vec![b"hello", b"3", b"auth", b"u", b"p", b"setname", b"n"];
        assert_eq!(
            parse(&frame),
            Ok(Command::Hello(Hello {
                version: Some(Version::Resp3),
                auth: Some((b"u", b"p")),
                name: Some(b"n"),
            }))
        );
        let frame: Vec<&[u8]> = vec![b"auth", b"secret"];
        assert_eq!(
            parse(&frame),
            Ok(Command::Auth {
                user: None,
                pass: b"secret"
            })
        );
    }

    #[test]
    fn parse_connection_commands_wrong_arity() {
        for words in [
            &["ping", "a", "b"][..],
            &["echo"],
            &["select"],
            &["select", "1", "2"],
            &["client"],
            &["auth"],
        ] {
            let name = words[0];
            assert_eq!(
                parsed(words),
                Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ))
            );
        }
    }

    #[test]
    fn parse_connection_commands_bad_arguments() {
        assert_eq!(
            parsed(&["select", "16"]),
            Err("ERR DB index is out of range".into())
        );
        assert_eq!(
            parsed(&["select", "-1"]),
            Err("ERR DB index is out of range".into())
        );
        assert_eq!(
            parsed(&["select", "x"]),
            Err("ERR value is not an integer or out of range".into())
        );
        assert_eq!(
            parsed(&["auth", "a", "b", "c"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["hello", "4"]),
            Err("NOPROTO unsupported protocol version".into())
        );
        assert_eq!(
            parsed(&["hello", "three"]),
            Err("ERR Protocol version is not an integer or out of range".into())
        );
        assert_eq!(
            parsed(&["hello", "3", "auth", "u"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["hello", "3", "bogus"]),
            Err("ERR syntax error".into())
        );
        assert_eq!(
            parsed(&["client", "kill", "x"]),
            Err("ERR unknown subcommand or wrong number of arguments for 'CLIENT|kill' (ramstore supports ID, GETNAME, SETNAME, SETINFO)".into())
        );
        assert_eq!(
            parsed(&["client", "id", "extra"]),
            Err("ERR unknown subcommand or wrong number of arguments for 'CLIENT|id' (ramstore supports ID, GETNAME, SETNAME, SETINFO)".into())
        );
        assert_eq!(
            parsed(&["client", "setname", "a b"]),
            Err("ERR Client names cannot contain spaces, newlines or special characters.".into())
        );
    }

    #[test]
    fn valid_name_rejects_spaces_and_long_names() {
        assert!(valid_name(b"worker-1").is_ok());
        assert!(valid_name(b"").is_ok());
        assert_eq!(valid_name(b"a b"), Err(ParseError::ClientNameInvalid));
        assert_eq!(
            valid_name(&[b'a'; MAX_CLIENT_NAME_BYTES + 1]),
            Err(ParseError::ClientNameTooLong)
        );
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
    }
}
