"""Reports of experiment runs (Markdown and self-contained HTML) and of the committed claims."""

from .claim_pages import write_claims_report
from .html import render_html
from .markdown import render_markdown
from .writer import HTML_REPORT, MARKDOWN_REPORT, write_report

__all__ = [
    "HTML_REPORT",
    "MARKDOWN_REPORT",
    "render_html",
    "render_markdown",
    "write_claims_report",
    "write_report",
]
