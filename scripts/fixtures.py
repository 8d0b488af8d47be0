#!/usr/bin/env python3
"""The test fixtures (test/models/<name>/) travel as one archive, test/models/fixtures.tar.xz.

Fixtures exported from one seeded model repeat the same weights (the fixtures' initializers
were 31.6 MB, 12.6 MB of them distinct), and a single xz stream, whose dictionary spans the
whole archive, stores each repeat once: 52.8 MB of files become 9 MB in the tree, which
keeps a GPU call's carry (the tree and the GPU bundle) within its 64 MiB.

    python3 scripts/fixtures.py unpack   # test/models/<name>/ from the archive (the build's
                                         # CMake configure does it; a no-op when current)
    python3 scripts/fixtures.py pack     # the archive from test/models/<name>/, after the
                                         # fixture scripts (tools/fixtures) changed a fixture
    python3 scripts/fixtures.py check    # the unpacked fixtures are the archive's, or why not

The unpacked folders are ignored by git; the archive is what is committed. A fixture is a
folder of test/models with a meta.json. Standard library only, so the GPU machine (no
build of its own) unpacks with its Python too. The archive is reproducible: sorted names,
no times, owners or modes beyond the executable bit.
"""
import argparse
import hashlib
import io
import lzma
import os
import sys
import tarfile
from pathlib import Path

MODELS = Path(__file__).resolve().parents[1] / "test" / "models"
ARCHIVE = MODELS / "fixtures.tar.xz"
STAMP = MODELS / ".fixtures-unpacked"  # the sha256 of the archive last unpacked


def fixture_files(models: Path) -> list[Path]:
    files = []
    for folder in sorted(p for p in models.iterdir() if (p / "meta.json").is_file()):
        files += sorted(p for p in folder.rglob("*") if p.is_file()
                        and "__pycache__" not in p.parts)
    return files


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pack(models: Path, archive: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in fixture_files(models):
            info = tarfile.TarInfo(path.relative_to(models).as_posix())
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    # preset 9 | EXTREME: a 64 MiB dictionary, so repeats anywhere in the archive are found.
    archive.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    STAMP.write_text(digest(archive) + "\n")
    print(f"fixtures: packed {len(fixture_files(models))} files into {archive} "
          f"({archive.stat().st_size} bytes)")


def members(archive: Path):
    with tarfile.open(archive, mode="r:xz") as tar:
        for member in tar:
            name = Path(member.name)
            if name.is_absolute() or ".." in name.parts or not member.isfile():
                sys.exit(f"fixtures: {archive}: refusing member {member.name!r}")
            yield member, tar.extractfile(member).read()


def unpack(models: Path, archive: Path) -> None:
    if not archive.is_file():
        sys.exit(f"fixtures: {archive} is missing")
    current = digest(archive)
    if STAMP.is_file() and STAMP.read_text().strip() == current:
        return
    count = 0
    for member, data in members(archive):
        target = models / member.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, member.mode & 0o755 | 0o644)
        count += 1
    STAMP.write_text(current + "\n")
    print(f"fixtures: unpacked {count} files from {archive}")


def check(models: Path, archive: Path) -> int:
    packed = {}
    for member, data in members(archive):
        packed[member.name] = data
    present = {p.relative_to(models).as_posix(): p for p in fixture_files(models)}
    problems = [f"only in the archive: {n}" for n in sorted(set(packed) - set(present))]
    problems += [f"not in the archive (run pack): {n}" for n in sorted(set(present) - set(packed))]
    problems += [f"differs from the archive (run pack): {n}"
                 for n in sorted(set(packed) & set(present))
                 if present[n].read_bytes() != packed[n]]
    for problem in problems:
        print(f"fixtures: {problem}")
    if not problems:
        print(f"fixtures: {len(packed)} files, unpacked as packed")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["pack", "unpack", "check"])
    args = parser.parse_args()
    if args.command == "pack":
        pack(MODELS, ARCHIVE)
    elif args.command == "unpack":
        unpack(MODELS, ARCHIVE)
    else:
        return check(MODELS, ARCHIVE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
