// CPUBudgetTests: TK_CPU_BUDGET's parsing (docs/DispatchPool.md, "Width"; issue 49): digits only,
// 1 to 4,096 — a sign, spaces or anything else refuse the whole value — and the line that says
// so names the value cut at 80 characters with its control characters masked, as TK_DIAGNOSTICS
// does. Judged against literal expectations (the parser is a pure function).
import XCTest

@testable import ThreadKit

final class CPUBudgetTests: XCTestCase {
    func testOnlyPlainDigitsFromOneTo4096AreABudget() {
        let accepted: [(String, Int)] = [("8", 8), ("1", 1), ("4096", 4_096), ("0016", 16)]
        for (text, value) in accepted { XCTAssertEqual(CPUBudget.parseBudget(text), value, "TK_CPU_BUDGET=\(text)") }
        let refused = [
            "+8", "-8", " 8", "8 ", "0", "4097", "", "8.0", "0x10", "８", "1_000", "99999999999999999999", "+", "8\n",
        ]
        for text in refused { XCTAssertNil(CPUBudget.parseBudget(text), "TK_CPU_BUDGET=\(text.debugDescription)") }
    }

    func testTheWarningNamesTheValueCutAt80CharactersWithControlsMasked() {
        let long = String(repeating: "9", count: 120_000)
        let warning = CPUBudget.budgetWarning(long, usable: 2)
        XCTAssertTrue(warning.contains("TK_CPU_BUDGET=" + String(repeating: "9", count: 80) + "... is not"), warning)
        XCTAssertLessThan(warning.count, 300, "the value must be cut, not echoed whole")
        XCTAssertTrue(warning.contains("digits only"), warning)
        XCTAssertTrue(warning.contains("the 2 CPU(s)"), warning)

        let plus = CPUBudget.budgetWarning("+8", usable: 3)
        XCTAssertTrue(plus.hasPrefix("ThreadKit: TK_CPU_BUDGET=+8 is not a whole number from 1 to 4096"), plus)

        let escape = CPUBudget.budgetWarning("8\u{1B}[31m\n", usable: 1)
        XCTAssertTrue(escape.contains("TK_CPU_BUDGET=8?[31m? is not"), escape)
        XCTAssertFalse(escape.contains("\u{1B}"), escape)
    }
}
