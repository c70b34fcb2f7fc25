"""Predicate trees and their conservative three-valued evaluation over file statistics."""

from deltaport.expressions.evaluate import FileColumns, prune_mask
from deltaport.expressions.tree import (
    And,
    Column,
    Comparison,
    Expr,
    In,
    IsNull,
    Literal,
    Not,
    Or,
    Unsupported,
    and_all,
    columns_of,
    push_down_not,
    rename_columns,
)

__all__ = [
    "And",
    "Column",
    "Comparison",
    "Expr",
    "FileColumns",
    "In",
    "IsNull",
    "Literal",
    "Not",
    "Or",
    "Unsupported",
    "and_all",
    "columns_of",
    "prune_mask",
    "push_down_not",
    "rename_columns",
]
