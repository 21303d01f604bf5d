"""Read a plugin's JSON data file: the one reader the guard and the watch share in the serving environment.

This file is copied, byte for byte, into each plugin's package there (``patchkit_guard/plugin_file.py``
beside ``guard.py``, ``patchkit_watch/plugin_file.py`` beside ``watch.py``; :mod:`patchkit.guard.guard`
and :mod:`patchkit.watch.watch` write it), and runs without patchkit: standard library only, Python 3.8
or newer. In patchkit's own tree the plugin modules import it from here.
"""

import json


def read_json(path, fmt, reader):
    """The JSON object in ``path`` whose ``format`` is ``fmt``.

    Args:
        path: the data file (``manifest.json``, ``watch.json``).
        fmt: the format number the plugin's code reads.
        reader: who reads it, for the message (``this guard``).
    Returns:
        The object, a dict.
    Raises:
        ValueError: the file cannot be read or parsed, is not an object, or has another format.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ValueError("cannot read {}: {}".format(path, exc))
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise ValueError(
            "{} has format {!r}; {} reads format {}".format(
                path, data.get("format") if isinstance(data, dict) else None, reader, fmt
            )
        )
    return data
