"""Every diagnostic id is documented."""
import os

from gcdsl import Diag

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "errors.md")


def test_every_diag_id_is_in_docs_errors_md():
    text = open(DOC).read()
    missing = [d.value for d in Diag if f"`{d.value}`" not in text]
    assert not missing, f"document these in docs/errors.md: {missing}"
