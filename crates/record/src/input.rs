//! Files kiln is handed by its user or by others (a plan, its data files, a request body, a
//! barrier's ready files, a HAR): opened without blocking, read only when they are regular
//! files, and never more than a bound. A FIFO named as a data file once hung kiln past every
//! timeout and its first SIGTERM; `/dev/zero` as a ready file was read until memory ran out.

use std::fs::File;
use std::io::{Error, ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` for reading if it is a regular file (links are followed: a plan's data file
/// may be one). The open does not block on a FIFO; a FIFO, a device, a socket or a folder is
/// an error that says what it is.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        // reads of a regular file never block; the flag is cleared all the same so that a
        // reader handed this file sees an ordinary one
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor this function owns, with integer arguments.
        unsafe {
            let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
        return Ok(file);
    }
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(Error::new(
        ErrorKind::InvalidInput,
        format!("{what}, not a regular file"),
    ))
}

/// The bytes of the regular file at `path`, at most `max`; more is an error that says so.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// As [`read_regular`], as UTF-8 text.
pub fn read_regular_text(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_regular(path, max)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_never_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let err = read_regular(&fifo, 10).unwrap_err();
        assert_eq!(err.to_string(), "a FIFO, not a regular file");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(
            read_regular(Path::new("/dev/zero"), 10)
                .unwrap_err()
                .to_string(),
            "a device, not a regular file"
        );
        assert!(read_regular(dir.path(), 10).is_err());
        let file = dir.path().join("f");
        std::fs::write(&file, "12345").unwrap();
        assert_eq!(read_regular(&file, 5).unwrap(), b"12345");
        assert_eq!(
            read_regular(&file, 4).unwrap_err().to_string(),
            "larger than 4 bytes"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular_text(&link, 5).unwrap(), "12345");
    }
}
