"""`radixrt keys add FILE --tenant T [--role user|admin] [--key K]`: add a hashed key entry to
a key file (created if missing), print the new secret once. `radixrt keys list FILE`: the
entries' tenants and roles (never the secrets). A running server takes the change on SIGHUP.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from pathlib import Path

from radixrt.serve.web.keys import ROLES, KeyFileError, KeyRing, hash_key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="radixrt keys", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add a key for a tenant; prints the secret once")
    add.add_argument("file")
    add.add_argument("--tenant", required=True)
    add.add_argument("--role", choices=ROLES, default="user")
    add.add_argument("--key", default=None, help="the secret; default: 32 random bytes, hex")
    show = sub.add_parser("list", help="tenants and roles in a key file")
    show.add_argument("file")
    args = p.parse_args(argv)
    path = Path(args.file)
    try:
        if args.command == "list":
            for entry in _entries(path):
                print(f"{entry['tenant']}\t{entry.get('role', 'user')}")
            return 0
        key = args.key or secrets.token_hex(32)
        entries = [
            *_entries(path),
            {"key": hash_key(key), "tenant": args.tenant, "role": args.role},
        ]
        text = json.dumps({"keys": entries}, indent=2) + "\n"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o600)
        KeyRing.from_file(tmp)  # the whole file must still be valid before it replaces the old
        tmp.replace(path)
    except KeyFileError as e:
        print(f"radixrt keys: {e}", file=sys.stderr)
        return 2
    print(key)
    return 0


def _entries(path: Path) -> list[dict]:
    if not path.exists():
        return []
    KeyRing.from_file(path)  # refuses a broken file with its reason
    return list(json.loads(path.read_text())["keys"])


if __name__ == "__main__":
    sys.exit(main())
