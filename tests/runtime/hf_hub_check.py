"""hf_hub_check.py - huggingface_hub's own view of a Hugging Face cache (tests/runtime/hf_hub.sh).

  python hf_hub_check.py cached CACHE [REPO SOURCE REVS FILES]...
      Offline (HF_HUB_OFFLINE=1): scan_cache_dir(CACHE) reports each REPO with no warning and no
      incomplete file; its one snapshot holds exactly FILES (comma-separated paths), each as big as
      in SOURCE (the repository's folder), and the refs REVS (comma-separated) name its commit;
      the repository's size on disk is that of its distinct contents. For each revision,
      hf_hub_download(local_files_only=True) finds every file, with SOURCE's bytes,
      try_to_load_from_cache reads the files marked absent (.no_exist) as absent (and SOURCE has
      none of them), and snapshot_download(local_files_only=True) finds the snapshot folder.
  python hf_hub_check.py verify CACHE REPO REV FILES
      Online: HfApi.verify_repo_checksums against the hub of HF_ENDPOINT: no cached file differs
      from the hub's digests (git blob sha1, LFS sha256), none is unknown to the hub, and the hub
      files the cache lacks are the ones outside FILES; each of FILES links to the blob named by
      the etag get_hf_file_metadata reads from the hub.
  python hf_hub_check.py log ENDPOINT (reset | quiet | no-refetch FILES)
      The loopback hub's request log (tests/hub_server.mjs): cleared; empty; or without a GET of
      any of FILES (from the hub or its CDN).

Prints "ok ..." per check and "FAIL ..." per failure; exit 0 when all hold, else 1.
"""

import json
import os
import sys
import urllib.request
from pathlib import Path

failures = 0


def check(ok, what):
    global failures
    if ok:
        print(f"ok   {what}")
    else:
        failures += 1
        print(f"FAIL {what}")
    return ok


def split(s):
    return [x for x in s.split(",") if x]


def cached(cache, specs):
    import huggingface_hub as hh

    report = hh.scan_cache_dir(cache)
    check(not report.warnings, f"scan_cache_dir: no warnings {[str(w) for w in report.warnings]}")
    check(not report.incomplete_files, f"scan_cache_dir: no incomplete files {sorted(str(f.file_path) for f in report.incomplete_files)}")
    by_id = {r.repo_id: r for r in report.repos}
    for repo_id, source, revs, files in specs:
        source = Path(source)
        revs, files = split(revs), set(split(files))
        repo = by_id.get(repo_id)
        if not check(repo is not None and repo.repo_type == "model", f"{repo_id}: scanned as a model repository"):
            continue
        if not check(len(repo.revisions) == 1, f"{repo_id}: one snapshot ({len(repo.revisions)})"):
            continue
        (rev,) = repo.revisions
        ref_file = lambda r: Path(repo.repo_path) / "refs" / r
        check(len(rev.commit_hash) == 40 and all(c in "0123456789abcdef" for c in rev.commit_hash),
              f"{repo_id}: snapshot named by a commit hash ({rev.commit_hash})")
        check(set(rev.refs) == set(revs), f"{repo_id}: refs {sorted(rev.refs)} == {sorted(revs)}")
        for r in revs:
            text = ref_file(r).read_text() if ref_file(r).is_file() else None
            check(text == rev.commit_hash, f"{repo_id}: refs/{r} holds the commit, nothing else ({text!r})")
        seen = {Path(f.file_path).relative_to(rev.snapshot_path).as_posix(): f for f in rev.files}
        check(set(seen) == files, f"{repo_id}: snapshot files {sorted(seen)} == {sorted(files)}")
        sizes_ok = all(f.size_on_disk == (source / name).stat().st_size for name, f in seen.items())
        check(sizes_ok, f"{repo_id}: every file's size on disk is the source file's")
        distinct = {}
        for name in files:
            data = (source / name).read_bytes()
            distinct[data] = len(data)
        want = sum(distinct.values())
        check(repo.size_on_disk == want and rev.size_on_disk == want,
              f"{repo_id}: size on disk {repo.size_on_disk} (snapshot {rev.size_on_disk}) == {want}")
        check(repo.nb_files == len(distinct), f"{repo_id}: {repo.nb_files} blobs == {len(distinct)} distinct contents")
        for r in revs:
            bad = []
            for name in sorted(files):
                try:
                    p = hh.hf_hub_download(repo_id, name, revision=r, local_files_only=True)
                except Exception as e:  # noqa: BLE001 - any failure is the finding
                    bad.append(f"{name}: {type(e).__name__}: {e}")
                    continue
                if Path(p) != Path(rev.snapshot_path) / name:
                    bad.append(f"{name}: at {p}, not in the snapshot")
                elif Path(p).read_bytes() != (source / name).read_bytes():
                    bad.append(f"{name}: bytes differ from the source")
            check(not bad, f"{repo_id}@{r}: hf_hub_download(local_files_only=True) finds {len(files)} files with the source's bytes {bad}")
            # The files marked absent (.no_exist/<commit>/<path>, which transformers reads to ask no
            # more) are absent from the repository, and read as such; the others are not marked.
            no_exist = Path(repo.repo_path) / ".no_exist" / rev.commit_hash
            marked = sorted(p.relative_to(no_exist).as_posix() for p in no_exist.rglob("*") if p.is_file())
            bad = [m for m in marked if (source / m).exists()]
            bad += [m for m in marked if hh.try_to_load_from_cache(repo_id, m, revision=r) is not hh._CACHED_NO_EXIST]
            bad += [n for n in files if hh.try_to_load_from_cache(repo_id, n, revision=r) != str(Path(rev.snapshot_path) / n)]
            check(not bad, f"{repo_id}@{r}: try_to_load_from_cache: {len(files)} files cached, {len(marked)} marked absent {bad}")
            try:
                snap = hh.snapshot_download(repo_id, revision=r, local_files_only=True)
                check(Path(snap) == Path(rev.snapshot_path), f"{repo_id}@{r}: snapshot_download(local_files_only=True) -> {snap}")
            except Exception as e:  # noqa: BLE001
                check(False, f"{repo_id}@{r}: snapshot_download(local_files_only=True): {type(e).__name__}: {e}")


def verify(cache, repo_id, rev, files):
    import huggingface_hub as hh

    files = set(split(files))
    v = hh.HfApi().verify_repo_checksums(repo_id, revision=rev, cache_dir=cache)
    check(not v.mismatches, f"{repo_id}@{rev}: verify_repo_checksums: no mismatch {v.mismatches}")
    check(not v.extra_paths, f"{repo_id}@{rev}: verify_repo_checksums: no file unknown to the hub {v.extra_paths}")
    check(v.checked_count == len(files), f"{repo_id}@{rev}: verify_repo_checksums checked {v.checked_count} == {len(files)}")
    check(not (set(v.missing_paths) & files), f"{repo_id}@{rev}: the hub files not cached {v.missing_paths} are outside the fetched ones")
    # A blob is named by the etag huggingface_hub reads from the hub's metadata (the LFS sha256 or
    # the git blob sha1): the name it looks for before it downloads a file.
    snapshot = Path(hh.snapshot_download(repo_id, revision=rev, local_files_only=True))
    bad = []
    for name in sorted(files):
        meta = hh.get_hf_file_metadata(hh.hf_hub_url(repo_id, name, revision=rev))
        blob = os.readlink(snapshot / name)
        if Path(blob).name != meta.etag or Path(blob).parent != Path(*[".."] * (name.count("/") + 2), "blobs"):
            bad.append(f"{name} -> {blob}, etag {meta.etag}")
    check(not bad, f"{repo_id}@{rev}: every snapshot entry links to ../../blobs/<the hub's etag> {bad}")


def hub_log(endpoint, what, files):
    def control(name):
        with urllib.request.urlopen(f"{endpoint}/_control/{name}", timeout=10) as r:
            return json.loads(r.read())

    if what == "reset":
        control("reset")
        return
    log = control("log")
    if what == "quiet":
        check(not log, f"the hub was not asked anything {[(e['method'], e['path']) for e in log]}")
    elif what == "no-refetch":
        names = set(split(files))
        got = [(e["server"], e["path"]) for e in log if e["method"] == "GET" and e.get("file") in names]
        check(not got, f"no cached file fetched again {got}")
    else:
        sys.exit(f"hf_hub_check: unknown log action {what}")


def main(argv):
    if len(argv) >= 2 and argv[0] == "cached" and (len(argv) - 2) % 4 == 0:
        cached(argv[1], [argv[i : i + 4] for i in range(2, len(argv), 4)])
    elif len(argv) == 5 and argv[0] == "verify":
        verify(*argv[1:])
    elif len(argv) in (3, 4) and argv[0] == "log":
        hub_log(argv[1], argv[2], argv[3] if len(argv) == 4 else "")
    else:
        sys.exit(__doc__)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
