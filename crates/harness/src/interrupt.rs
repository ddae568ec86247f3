//! Clean-up when a run is interrupted (Ctrl-C, SIGTERM): a soak runs for minutes
//! and users stop it; without this the process died with its servers still
//! running, its network namespaces and bridge still configured and its small disks
//! still mounted. [`install`] blocks SIGINT and SIGTERM in the calling thread (and
//! so in every thread started after it) and waits for them on a thread of its own,
//! which then kills this process's children, deletes the namespaces and bridge this
//! process created ([`crate::netns::remove_stale_for_pid`]), unmounts the tmpfs
//! disks under the run's directory ([`crate::disk::unmount_under`]), removes its
//! test etcd's data and exits with 128 + the signal number.
//!
//! Call [`install`] first thing in `main`, before any other thread exists.

use std::path::PathBuf;
use std::process::Command;

/// Installs the handler described in the module doc; `dir` is the run's directory
/// (its small disks are unmounted). Errors only if the signal mask cannot be set.
pub fn install(dir: PathBuf) -> std::io::Result<()> {
    // SAFETY: `set` is a plain local sigset_t, initialised by sigemptyset before
    // use; pthread_sigmask only reads it.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        set
    };
    std::thread::Builder::new()
        .name("interrupt".into())
        .spawn(move || {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` is initialised above and `signal` is a valid out slot.
            if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                return;
            }
            eprintln!("interrupted (signal {signal}): stopping the cluster and cleaning up");
            clean_up(&dir);
            std::process::exit(128 + signal);
        })?;
    Ok(())
}

/// Kills this process's children and removes what this process configured.
fn clean_up(dir: &std::path::Path) {
    let pid = std::process::id();
    let _ = Command::new("pkill")
        .args(["-KILL", "-P", &pid.to_string()])
        .status();
    crate::netns::remove_stale_for_pid(pid);
    crate::disk::unmount_under(dir);
    crate::etcd::remove_dirs_of_process(pid);
}
