//! Reading `ldd`'s output: the files a dynamically linked program loads. netpath copies them
//! into the Docker image it builds of itself (`netpath/src/docker/image.rs`), xtask into the
//! VM's initramfs (`xtask/src/vm/initramfs.rs`). It lives here because this is the one crate
//! both link: xtask does not link netpath. Like the rest of the crate it is `no_std`, so it
//! borrows from the text instead of allocating; each caller collects as it needs.

/// The files `ldd` names, in its order: `Ok(path)` for `name => /path (0x…)` and for the
/// dynamic loader's bare `/lib64/ld-linux-x86-64.so.2 (0x…)`; `Err(name)` for
/// `name => not found`, a library the program needs that this system lacks (a copy without it
/// would not start). Lines naming no file are skipped: the vDSO (`linux-vdso.so.1 (0x…)`, or
/// `linux-vdso.so.1 =>  (0x…)` from older glibc) lives in the kernel, and a static binary's
/// `statically linked` has nothing to copy.
pub fn files(text: &str) -> impl Iterator<Item = Result<&str, &str>> {
    text.lines().filter_map(|line| {
        let (name, rest) = match line.split_once("=>") {
            Some((name, rest)) => (name.trim(), rest.trim()),
            None => ("", line.trim()),
        };
        if rest.starts_with("not found") {
            return Some(Err(name));
        }
        let path = rest.split_whitespace().next()?;
        path.starts_with('/').then_some(Ok(path))
    })
}

#[cfg(test)]
mod tests {
    use super::files;
    use std::vec::Vec;

    #[test]
    fn libraries_and_the_loader_in_order() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f925cf44000)\n";
        let v: Vec<_> = files(out).collect();
        assert_eq!(
            v,
            [
                Ok("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                Ok("/lib/x86_64-linux-gnu/libc.so.6"),
                Ok("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn a_missing_library_is_named_and_nothing_else_counts() {
        let out = "\tlinux-vdso.so.1 =>  (0x00007ffc)\n\
                   \tlibfoo.so.1 => not found\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n";
        let v: Vec<_> = files(out).collect();
        assert_eq!(
            v,
            [Err("libfoo.so.1"), Ok("/lib/x86_64-linux-gnu/libc.so.6")]
        );
        assert_eq!(files("\tstatically linked\n").count(), 0);
        assert_eq!(files("").count(), 0);
    }
}
