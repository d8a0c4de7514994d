"""Formatting of certificates: tables and JSON. Formatting only; nothing here computes a bound."""

from ._json import check_json_path as check_json_path, write_json as write_json
from ._table import COLUMNS as COLUMNS, format_rows as format_rows, format_table as format_table, format_value as format_value
