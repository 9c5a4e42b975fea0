"""Removes the buildah images no build can use again: every untagged image whose layers are
not the first layers of a tagged image (an earlier build's results and its layer cache).
The layer cache of the tagged images stays (``buildah bud --layers`` reuses it).

    prune-images.py          remove them, print how many and their size
    prune-images.py --dry    print them only
"""

from __future__ import annotations

import json
import subprocess
import sys


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def diff_ids(image: str) -> list[str]:
    config = json.loads(buildah("inspect", "--type", "image", image))
    return [str(d) for d in config["OCIv1"]["rootfs"]["diff_ids"] or []]


def main() -> int:
    dry = "--dry" in sys.argv[1:]
    images = json.loads(buildah("images", "--all", "--json") or "[]")
    tagged = [diff_ids(i["id"]) for i in images if i.get("names")]
    stale = []
    for image in images:
        if image.get("names"):
            continue
        layers = diff_ids(image["id"])
        if not any(t[: len(layers)] == layers for t in tagged):
            stale.append(image)
    for image in stale:
        print(f"images: {'stale' if dry else 'removing'} {image['id']} ({image['size']}, "
              f"{image['createdat']})")
        if not dry:
            subprocess.run(["buildah", "rmi", image["id"]], capture_output=True, check=False)
    print(f"images: {len(stale)} stale image(s) {'found' if dry else 'removed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
