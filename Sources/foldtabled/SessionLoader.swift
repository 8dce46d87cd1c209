import FoldtableCore
import FoldtableServer

/// Sessions that exist from the start: the demo, created when the store has none yet.
enum SessionLoader {
    static func loadDemo(into hub: Hub, config: ServerConfig) {
        var options = TableOptions()
        options.busyThresholdMs = config.busyThresholdMs
        let largeRows = min(config.demoLargeRows, config.tableLimits.maxRowsPerSection)
        hub.createSessionIfAbsent("demo", table: DemoTable.make(options: options, largeRows: largeRows))
    }
}
