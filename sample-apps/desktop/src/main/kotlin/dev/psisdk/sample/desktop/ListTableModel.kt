package dev.psisdk.sample.desktop

import javax.swing.table.AbstractTableModel

/**
 * A read-only Swing table model over a list of rows: each column has a title and a function
 * giving a row's cell. [rows] is replaced as a whole when the state changes.
 *
 * @param T the row type.
 * @param columns the columns, in order: title and cell.
 */
class ListTableModel<T>(private val columns: List<Pair<String, (T) -> Any?>>) : AbstractTableModel() {
    /** The rows shown; setting it refreshes the table. */
    var rows: List<T> = emptyList()
        set(value) {
            if (value === field) return
            field = value
            fireTableDataChanged()
        }

    override fun getRowCount() = rows.size

    override fun getColumnCount() = columns.size

    override fun getColumnName(column: Int) = columns[column].first

    override fun getColumnClass(column: Int) = String::class.java

    override fun getValueAt(row: Int, column: Int): Any? = columns[column].second(rows[row])
}
