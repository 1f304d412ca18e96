#pragma once
// Everything the Postgres store sends, one role per header under sql/: statement text
// (statements.hpp), parameters (params.hpp), binary arrays (binary_array.hpp), quoting
// (quoting.hpp) and the pgbench script (pgbench.hpp). All pure, safe from any thread.

#include "backends/postgres/sql/binary_array.hpp"
#include "backends/postgres/sql/params.hpp"
#include "backends/postgres/sql/pgbench.hpp"
#include "backends/postgres/sql/quoting.hpp"
#include "backends/postgres/sql/statements.hpp"
