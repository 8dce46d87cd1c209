extension SessionRoom {
    /// The Unix time in milliseconds of the input being handled (its `now` plus
    /// ``SessionCore/Settings/unixOffsetMs``), `nil` without an offset: what an order stamps the
    /// events it commits with.
    var unixTime: UInt64? {
        guard let offset = settings.unixOffsetMs else { return nil }
        let time = Int64(clamping: now).addingReportingOverflow(offset)
        return time.overflow || time.partialValue < 0 ? nil : UInt64(time.partialValue)
    }
}
