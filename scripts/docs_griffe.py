"""A griffe extension for the API pages (mkdocs.yml): docstrings are plain text written for
help() and the stubs, where `out[i][j]` is an index; in Markdown `[i][j]` is a reference link that
autorefs cannot resolve (a --strict failure). Escaping the second bracket keeps the text as written.
"""
import re

import griffe

REFERENCE = re.compile(r"\]\[")


class PlainBrackets(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None and "][" in obj.docstring.value:
            obj.docstring.value = REFERENCE.sub(r"]\\[", obj.docstring.value)
