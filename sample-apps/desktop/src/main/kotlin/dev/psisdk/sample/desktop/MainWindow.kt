package dev.psisdk.sample.desktop

import dev.psisdk.MatchedContact
import dev.psisdk.Protocol
import dev.psisdk.ProtocolChoice
import dev.psisdk.RejectedContact
import java.awt.BorderLayout
import java.awt.Color
import java.awt.Dimension
import java.awt.Font
import java.awt.GridBagConstraints
import java.awt.GridBagLayout
import java.awt.Insets
import java.awt.event.WindowAdapter
import java.awt.event.WindowEvent
import java.io.File
import javax.swing.BorderFactory
import javax.swing.ButtonGroup
import javax.swing.JButton
import javax.swing.JComponent
import javax.swing.JFileChooser
import javax.swing.JFrame
import javax.swing.JLabel
import javax.swing.JPanel
import javax.swing.JPasswordField
import javax.swing.JProgressBar
import javax.swing.JRadioButton
import javax.swing.JScrollPane
import javax.swing.JTabbedPane
import javax.swing.JTable
import javax.swing.JTextField
import javax.swing.UIManager
import javax.swing.WindowConstants
import javax.swing.event.DocumentEvent
import javax.swing.event.DocumentListener
import javax.swing.filechooser.FileNameExtensionFilter
import javax.swing.text.JTextComponent
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.cancel
import kotlinx.coroutines.launch
import kotlinx.coroutines.swing.Swing

/**
 * The sample's window. It holds no state of its own: it renders [viewModel]'s
 * [MatchViewModel.state] on the Swing event thread ([Dispatchers.Swing]) and turns the
 * user's input into the view model's actions. Create it on the event thread.
 *
 * Layout: the address book and the Open button; server URL, token, region, protocol, Match
 * and Cancel; tabs with the matched contacts (with their labels), the rejected entries
 * (with the reason) and the address book itself; the progress bar, the status line and the
 * summary of the last run.
 */
class MainWindow(private val viewModel: MatchViewModel) : JFrame("Private contact discovery — desktop sample") {
    private val ui = CoroutineScope(SupervisorJob() + Dispatchers.Swing)

    private val fileLabel = JLabel()
    private val openButton = JButton("Open address book…")
    private val serverField = JTextField(26)
    private val tokenField = JPasswordField(12)
    private val regionField = JTextField(3)
    private val dhButton = JRadioButton("DH-PSI").apply { toolTipText = "Fewest bytes; the registry is cached" }
    private val otButton = JRadioButton("OT-PSI").apply { toolTipText = "Least computation; more bytes and round trips" }
    private val autoButton = JRadioButton("Auto").apply { toolTipText = "The SDK predicts each protocol and runs the fastest" }
    private val matchButton = JButton("Match")
    private val cancelButton = JButton("Cancel")
    private val progressBar = JProgressBar(0, 1000).apply { isStringPainted = true }
    private val statusLabel = JLabel(" ")
    private val summaryLabel = JLabel(" ")
    private val tabs = JTabbedPane()
    private var lastDirectory: File? = null
    private var shownBook: AddressBook? = null
    private var shownResult: Any? = null

    private val matchedModel = ListTableModel<MatchedContact<AddressBook.Entry>>(
        listOf(
            "Name" to { it.contact.name ?: "" },
            "Phone / email" to { it.contact.value },
            "Normalized" to { it.identifier },
            "Label in the registry" to { it.label ?: "" },
        ),
    )
    private val rejectedModel = ListTableModel<RejectedContact<AddressBook.Entry>>(
        listOf(
            "Name" to { it.contact.name ?: "" },
            "Entry" to { it.contact.value.ifEmpty { "(none)" } },
            "Reason" to { UserMessages.reason(it.reason) },
        ),
    )
    private val bookModel = ListTableModel<AddressBook.Entry>(
        listOf(
            "Name" to { it.name ?: "" },
            "Phone / email" to { it.value.ifEmpty { "(none)" } },
            "Kind" to { if (it.value.isEmpty()) "" else it.kind.name.lowercase() + (it.type?.let { t -> " ($t)" } ?: "") },
        ),
    )

    init {
        defaultCloseOperation = WindowConstants.EXIT_ON_CLOSE
        addWindowListener(object : WindowAdapter() {
            override fun windowClosing(e: WindowEvent) {
                ui.cancel()
                viewModel.close()
            }
        })
        contentPane = JPanel(BorderLayout(0, 8)).apply {
            border = BorderFactory.createEmptyBorder(10, 10, 10, 10)
            add(settingsPanel(), BorderLayout.NORTH)
            add(tabs, BorderLayout.CENTER)
            add(statusPanel(), BorderLayout.SOUTH)
        }
        tabs.addTab("Matched", scroll(table(matchedModel)))
        tabs.addTab("Rejected", scroll(table(rejectedModel)))
        tabs.addTab("Address book", scroll(table(bookModel)))
        rootPane.defaultButton = matchButton

        val initial = viewModel.state.value
        serverField.text = initial.serverUrl
        tokenField.text = initial.token
        regionField.text = initial.region
        when (initial.protocol) {
            Protocol.OT -> otButton
            is ProtocolChoice.Auto -> autoButton
            else -> dhButton
        }.isSelected = true
        wireInputs()
        render(initial)
        ui.launch { viewModel.state.collect(::render) }

        preferredSize = Dimension(980, 640)
        pack()
        setLocationRelativeTo(null)
    }

    private fun settingsPanel(): JComponent {
        val panel = JPanel(GridBagLayout())
        val c = GridBagConstraints().apply { insets = Insets(3, 4, 3, 4); anchor = GridBagConstraints.WEST }
        fun add(component: JComponent, x: Int, y: Int, width: Int = 1, fill: Boolean = false) {
            c.gridx = x; c.gridy = y; c.gridwidth = width
            c.fill = if (fill) GridBagConstraints.HORIZONTAL else GridBagConstraints.NONE
            c.weightx = if (fill) 1.0 else 0.0
            panel.add(component, c)
        }
        add(JLabel("Address book"), 0, 0)
        add(fileLabel.apply { font = font.deriveFont(Font.BOLD) }, 1, 0, width = 5, fill = true)
        add(openButton, 6, 0, width = 2, fill = true)

        add(JLabel("Server URL"), 0, 1)
        add(serverField, 1, 1, fill = true)
        add(JLabel("Token"), 2, 1)
        add(tokenField, 3, 1)
        add(JLabel("Region"), 4, 1)
        add(regionField, 5, 1)
        ButtonGroup().apply { add(dhButton); add(otButton); add(autoButton) }
        val protocols = JPanel().apply {
            add(JLabel("Protocol")); add(dhButton); add(otButton); add(autoButton)
        }
        add(protocols, 1, 2, width = 5)
        add(matchButton, 6, 2, fill = true)
        add(cancelButton, 7, 2, fill = true)
        return panel
    }

    private fun statusPanel(): JComponent = JPanel(BorderLayout(8, 4)).apply {
        add(progressBar.apply { preferredSize = Dimension(220, preferredSize.height) }, BorderLayout.WEST)
        add(statusLabel, BorderLayout.CENTER)
        add(summaryLabel, BorderLayout.SOUTH)
    }

    private fun table(model: ListTableModel<*>) = JTable(model).apply {
        autoCreateRowSorter = true
        fillsViewportHeight = true
        rowHeight = (font.size * 1.6).toInt()
    }

    private fun scroll(table: JTable) = JScrollPane(table)

    /** The user's input goes to the view model; the window never writes its own state. */
    private fun wireInputs() {
        serverField.onChange { viewModel.setServerUrl(serverField.text) }
        tokenField.onChange { viewModel.setToken(String(tokenField.password)) }
        regionField.onChange { viewModel.setRegion(regionField.text) }
        dhButton.addActionListener { viewModel.setProtocol(Protocol.DH) }
        otButton.addActionListener { viewModel.setProtocol(Protocol.OT) }
        autoButton.addActionListener { viewModel.setProtocol(ProtocolChoice.AUTO) }
        matchButton.addActionListener { viewModel.match() }
        cancelButton.addActionListener { viewModel.cancel() }
        openButton.addActionListener { chooseFile() }
    }

    private fun chooseFile() {
        val chooser = JFileChooser(lastDirectory).apply {
            dialogTitle = "Open an address book"
            fileFilter = FileNameExtensionFilter("Address books (vCard, CSV)", "vcf", "vcard", "csv", "txt")
        }
        if (chooser.showOpenDialog(this) == JFileChooser.APPROVE_OPTION) {
            lastDirectory = chooser.currentDirectory
            viewModel.loadFile(chooser.selectedFile.toPath())
        }
    }

    /** Shows [state]; called on the event thread for every new state. */
    private fun render(state: MatchUiState) {
        val book = state.addressBook
        fileLabel.text = book?.let {
            val (format, records) = if (it.format == AddressBook.Format.VCARD) "vCard" to "cards" else "CSV" to "rows"
            "${it.source}  ($format: ${it.entries.size} entries from ${it.records} $records)"
        } ?: "none — open a vCard (.vcf) or CSV file"

        val editable = !state.isBusy
        for (field in listOf(openButton, serverField, tokenField, regionField, dhButton, otButton, autoButton)) {
            field.isEnabled = editable
        }
        matchButton.isEnabled = state.canMatch
        cancelButton.isEnabled = state.canCancel

        val status = state.status
        statusLabel.text = status.message
        statusLabel.foreground = if (status is MatchUiState.Status.Failed) ERROR_COLOR else UIManager.getColor("Label.foreground")
        when (status) {
            is MatchUiState.Status.Matching -> {
                progressBar.isIndeterminate = status.phase == null
                progressBar.value = (status.fraction * progressBar.maximum).toInt()
                progressBar.string = "${(status.fraction * 100).toInt()} %"
            }
            is MatchUiState.Status.Loading -> {
                progressBar.isIndeterminate = true
                progressBar.string = "Reading"
            }
            is MatchUiState.Status.Done -> {
                progressBar.isIndeterminate = false
                progressBar.value = progressBar.maximum
                progressBar.string = "Done"
            }
            else -> {
                progressBar.isIndeterminate = false
                progressBar.value = 0
                progressBar.string = ""
            }
        }
        summaryLabel.text = state.summary ?: " "

        // Show the address book when a new one is loaded, the matches when a run finishes.
        if (book != null && book !== shownBook) tabs.selectedIndex = 2
        if (state.result != null && state.result !== shownResult) tabs.selectedIndex = 0
        shownBook = book
        shownResult = state.result
        matchedModel.rows = state.matches
        rejectedModel.rows = state.rejected
        bookModel.rows = book?.entries.orEmpty()
        tabs.setTitleAt(0, "Matched (${state.matches.size})")
        tabs.setTitleAt(1, "Rejected (${state.rejected.size})")
        tabs.setTitleAt(2, "Address book (${book?.entries?.size ?: 0})")
    }

    private companion object {
        val ERROR_COLOR = Color(0xB0, 0x1E, 0x1E)

        /** Calls [action] on every edit of the text. */
        fun JTextComponent.onChange(action: () -> Unit) {
            document.addDocumentListener(object : DocumentListener {
                override fun insertUpdate(e: DocumentEvent) = action()
                override fun removeUpdate(e: DocumentEvent) = action()
                override fun changedUpdate(e: DocumentEvent) = action()
            })
        }
    }
}
