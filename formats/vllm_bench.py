"""stub"""

from pathlib import Path

from formats.imported import Imported


def read(path: Path) -> Imported:
    raise NotImplementedError
